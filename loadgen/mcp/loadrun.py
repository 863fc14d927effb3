"""``start_run``'s load: what the call asked for, checked against the server's limits,
and the one call into :func:`loadgen.api.sweep`.

Every call from the MCP server into ``api.sweep`` is in :func:`measure`, so a change of
that signature is a change here only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import api
from ..api import SIMULATOR
from ..config import RequestOptions
from ..engine import LevelResult, RunControl
from ..errors import ConfigError
from ..load import ArrivalRate, ConstantConcurrency, Load, StopRule
from ..levelplan import LevelPlan, profile_plan
from ..workload.prompts import PromptSource
from ..workload.settings import WorkloadSettings
from .options import ServerOptions

DEFAULT_REQUESTS = 20  # per level, when neither requests nor duration is given (as the CLI)

# Defaults come from the library's own dataclasses: defined once, there.
DEFAULT_PROMPTS = PromptSource()
DEFAULT_OPTIONS = RequestOptions()
DEFAULT_STOP = StopRule(requests=1)
DEFAULT_WORKLOAD = WorkloadSettings()


@dataclass(frozen=True)
class LoadRequest:
    """One ``start_run`` call: a sweep of load levels against one target."""

    target: str  # http(s)://..., sagemaker://ENDPOINT, or "simulator"
    concurrency: tuple[int, ...] = ()
    rate: tuple[float, ...] = ()
    arrival: str = "constant"
    max_in_flight: int | None = None
    max_rate: float | None = None
    seed: int = 0
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    input_tokens: int = DEFAULT_PROMPTS.input_tokens
    output_tokens: int = DEFAULT_PROMPTS.output_tokens
    api: str = DEFAULT_OPTIONS.api
    model: str | None = None
    stream: bool = DEFAULT_OPTIONS.stream
    ignore_eos: bool = DEFAULT_OPTIONS.ignore_eos
    api_key_env: str = DEFAULT_OPTIONS.api_key_env  # the variable's name, never its value
    region: str | None = None  # SageMaker targets
    inference_component: str | None = None
    payload_format: str = "auto"
    # SLOs judge every level (goodput); profile "slo-search" finds the highest load meeting
    # them (loadgen.knee), with the CLI's defaults.
    slo: tuple[str, ...] = ()
    profile: str | None = None
    rate_search: bool = DEFAULT_WORKLOAD.rate_search
    search_precision: float = DEFAULT_WORKLOAD.search_precision
    max_probes: int = DEFAULT_WORKLOAD.max_probes

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def checked(self, limits: ServerOptions) -> tuple["LoadRequest", list[str]]:
        """This request within the server's limits, and what was changed to get there.

        Raises ConfigError for what can't be fixed silently (too much concurrency, levels
        longer than the run limit, bad combinations)."""
        notes: list[str] = []
        request = self
        if not self.target.strip():
            raise ConfigError("give a target: an http(s):// URL, sagemaker://ENDPOINT, or "
                              f"{SIMULATOR!r} for the built-in simulator")
        if self.concurrency and self.rate:
            raise ConfigError("give either concurrency (closed loop) or rate (open loop), not both")
        if not self.concurrency and not self.rate:
            request = dataclasses.replace(request, concurrency=(1,))
        if self.requests is None and self.duration_s is None:
            request = dataclasses.replace(request, requests=DEFAULT_REQUESTS)
            notes.append(f"neither requests nor duration_s given: {DEFAULT_REQUESTS} requests "
                         "per level")
        too_many = [c for c in request.concurrency if c > limits.max_concurrency]
        if too_many:
            raise ConfigError(f"concurrency {max(too_many)} is above this server's limit of "
                              f"{limits.max_concurrency} (loadgen mcp --max-concurrency)")
        if request.rate:
            cap = limits.max_concurrency
            if request.max_in_flight is None or request.max_in_flight > cap:
                notes.append(f"max_in_flight set to the server's limit of {cap}: requests due "
                             "while it is full are counted as dropped")
                request = dataclasses.replace(request, max_in_flight=cap)
        if request.profile is not None:
            if request.profile != "slo-search":
                raise ConfigError(f"profile {request.profile!r}: the MCP server runs "
                                  "'slo-search' (or no profile)")
            if len(request.concurrency) > 1 or len(request.rate) > 1:
                raise ConfigError("profile slo-search starts from one concurrency (or one "
                                  "rate with rate_search), not a list")
            notes.append(f"slo-search probes at most concurrency {limits.max_concurrency} "
                         "(the server's limit)")
        levels = self.max_probes if request.profile else len(request.concurrency or request.rate)
        if request.duration_s is not None and request.duration_s * levels > limits.max_duration_s:
            raise ConfigError(f"{levels} level(s) of {request.duration_s:g} s is more than this "
                              f"server's run limit of {limits.max_duration_s:g} s "
                              "(loadgen mcp --max-duration)")
        request.loads()  # raises for bad values (rate <= 0, unknown arrival, ...)
        request.stop()
        request.prompts()  # the CLI's bounds on lengths, before the run starts
        request.options()
        request.plan(limits.max_concurrency)  # bad SLOs, precision, ... (one line each)
        return request, notes

    def workload(self) -> WorkloadSettings:
        return WorkloadSettings.with_slo_texts(
            self.slo, input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            seed=self.seed, profile=self.profile, rate_search=self.rate_search,
            search_precision=self.search_precision, max_probes=self.max_probes)

    def plan(self, ceiling: int) -> LevelPlan | None:
        """The profile's level plan (None: the listed levels); a concurrency search never
        probes above ``ceiling``."""
        return profile_plan(self.workload(), self.loads(), ceiling)

    def loads(self) -> list[Load]:
        if self.rate:
            if self.max_rate is not None:
                raise ConfigError("max_rate caps closed-loop runs; with rate the rate is the "
                                  "schedule")
            return [ArrivalRate(r, self.arrival, self.max_in_flight, self.seed) for r in self.rate]
        if self.max_in_flight is not None:
            raise ConfigError("max_in_flight applies to rate runs; concurrency is already a cap")
        return [ConstantConcurrency(c, self.max_rate) for c in self.concurrency]

    def stop(self) -> StopRule:
        return StopRule(self.requests, self.duration_s, self.warmup,
                        DEFAULT_STOP.graceful_stop_s)

    def options(self) -> RequestOptions:
        return RequestOptions(api=self.api, model=self.model, stream=self.stream,
                              ignore_eos=self.ignore_eos, api_key_env=self.api_key_env)

    def prompts(self) -> PromptSource:
        return PromptSource(self.input_tokens, self.output_tokens)

    def sagemaker_options(self) -> dict:
        if not self.target.startswith("sagemaker://"):
            return {}
        return {"region": self.region, "inference_component": self.inference_component,
                "payload_format": self.payload_format}


ProgressFn = Callable[[Load, dict], None]
LevelFn = Callable[[LevelResult], None]


async def measure(request: LoadRequest, out: Path, control: RunControl,
                  on_progress: ProgressFn, on_level: LevelFn, ceiling: int) -> None:
    """Run the sweep as ``loadgen sweep`` would, writing the results file to ``out``
    after every level (so a stopped run keeps what it measured). ``ceiling``: the most
    concurrency an SLO search may probe."""
    plan = request.plan(ceiling)
    await api.sweep(request.target, loads=plan or request.loads(), stop=request.stop(),
                    options=request.options(), prompts=request.prompts(),
                    workload=request.workload(), out=out, control=control,
                    on_progress=on_progress, on_level=on_level,
                    **request.sagemaker_options())
