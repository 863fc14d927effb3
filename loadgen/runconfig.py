"""One typed description of a run: what the CLI, the API and scenarios build, and what
every worker process (or Ray actor) receives.

Every default lives on a dataclass field, once: :class:`~loadgen.config.RequestOptions`
and :class:`~loadgen.config.Timeouts` (the request), :class:`~loadgen.workload.prompts.PromptSource`
(the prompts), :class:`~loadgen.load.StopRule` and the load models (when a level ends,
how it is driven), :class:`TargetConfig` and :class:`RunConfig` here. The CLI reads its
option defaults from these fields (:func:`default`), so a default changed here changes
everywhere. Every part is a frozen dataclass of plain values: a RunConfig pickles.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Sequence, Union

from .bounds import host_problem, text_problem
from .config import RequestOptions
from .errors import ConfigError
from .load import DEFAULT_REQUESTS, ArrivalRate, ConstantConcurrency, Load, StopRule
from .workload.prompts import PromptSource
from .workload.settings import WorkloadSettings

# One process's budget when ``workers="auto"`` sizes a run (BENCHMARKS.md, "Fast path"):
# what one process keeps accurate is an event rate, ~25k token events/s (256 streams at a
# 10 ms ITL: TTFT error p99 1.6x the raw client's; 1024 at 40 ms: 0.9x), and 512 streams
# at 10 ms took one process to 25-190 ms p99 where two workers kept 7-17 ms. Streams stand
# in for events/s (the ITL is not known before the run), sized for a 10 ms ITL. Open loop:
# not measured; an arrival rate whose in-flight requests are of that order for ~3 s streams.
STREAMS_PER_WORKER = 256
ARRIVALS_PER_S_PER_WORKER = 100.0

Workers = Union[int, str]  # a count, or "auto"


def default(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls``: click options read theirs here."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{cls.__name__}.{name} has no default")


@dataclass(frozen=True)
class TargetConfig:
    """Where requests go. ``url`` None: the built-in simulator (started by the run).

    The other fields only apply to ``sagemaker://`` URLs; giving one for an HTTP URL is an
    error (see :meth:`check`).
    """

    url: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    inference_component: str | None = None
    custom_attributes: str | None = None
    target_variant: str | None = None
    payload_format: str = "auto"

    @property
    def is_sagemaker(self) -> bool:
        return bool(self.url) and self.url.startswith("sagemaker://")

    def given_sagemaker_options(self) -> list[str]:
        """Names of the SageMaker-only fields that were set (``payload_format`` "auto" is unset)."""
        return [f.name for f in dataclasses.fields(self) if f.name != "url"
                and getattr(self, f.name) not in (None, "auto")]

    def check(self) -> "TargetConfig":
        http_url = self.url is not None and not self.is_sagemaker
        if http_url and (message := text_problem(self.url) or host_problem(self.url)):
            raise ConfigError(f"--target {message}; give a URL like http://127.0.0.1:8000")
        given = self.given_sagemaker_options()
        if given and not self.is_sagemaker:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ConfigError(f"{flags} only apply to sagemaker:// targets")
        return self

    def sagemaker_options(self) -> dict[str, Any]:
        """Keyword arguments for a SageMaker target ({} for HTTP URLs)."""
        if not self.is_sagemaker:
            return {}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "url" and getattr(self, f.name) is not None}


@dataclass(frozen=True)
class RunConfig:
    """A whole run: target, request options, prompts, load levels and their stop rule.

    ``workers``: processes generating the load (``"auto"``, the default: one process up
    to its budget, :func:`choose_workers`; 1 = this process always). ``ray``: a Ray cluster address (``auto``,
    ``local`` or ``ray://...``) to run the workers as Ray actors instead of processes.
    """

    loads: tuple[Load, ...]
    stop: StopRule
    target: TargetConfig = TargetConfig()
    options: RequestOptions = RequestOptions()
    prompts: PromptSource | None = None  # None: the workload's (synthetic, dataset, trace)
    workload: WorkloadSettings = WorkloadSettings()
    server_metrics_interval_s: float | None = 1.0  # None: don't sample vLLM /metrics
    workers: Workers = "auto"
    ray: str | None = None
    # Garbage collection off the measurement (loadgen.gcpolicy): setup frozen, thresholds
    # raised while a level is measured, restored after. False: leave the collector alone.
    quiet_gc: bool = True

    def __post_init__(self) -> None:
        if not self.loads:
            raise ConfigError("give at least one load level (--concurrency or --rate)")
        object.__setattr__(self, "loads", tuple(self.loads))
        self.target.check()
        check_workers(self.workers)

    def with_target(self, url: str) -> "RunConfig":
        """The same run aimed at ``url`` (the simulator's, once it is started)."""
        return dataclasses.replace(self, target=dataclasses.replace(self.target, url=url))

    def for_workers(self, prompts: Any) -> "RunConfig":
        """This run for worker processes: ``prompts`` (a :class:`PromptSource`) with one
        salt, chosen here, so every worker makes the same prompt for a request index.
        What cannot be split across processes yet is a one-line error."""
        given = self.one_process_only(prompts)
        if given:
            raise ConfigError(f"{', '.join(given)} run in one process only: drop "
                              "--workers/--ray (or use --workers 1)")
        return dataclasses.replace(self, prompts=prompts.salted())

    def one_process_only(self, prompts: Any = None) -> list[str]:
        """The options given that cannot be split across worker processes yet (``prompts``:
        the run's, when not ``self.prompts``)."""
        workload = self.workload
        prompts = prompts if prompts is not None else self.prompts
        return [flag for given, flag in (
            (workload.trace or (prompts is not None
                                and not isinstance(prompts, PromptSource)), "--trace"),
            (workload.profile, "--profile"))
            if given]

    def worker_choice(self, in_process_target: bool = False, prompts: Any = None) -> WorkerChoice:
        """How many processes generate the load, and why (``auto`` resolved against this
        machine's cores and this process's CPU affinity). ``in_process_target``: the
        caller gave a Target object, which worker processes cannot share."""
        if self.workers != "auto":
            count = int(self.workers)
            return WorkerChoice(count, self.workers, f"{count} workers, as asked" if count > 1
                                else "one process, as asked")
        held = (self.one_process_only(prompts)
                + (["a Target object"] if in_process_target else []))
        if held or self.ray is not None:
            why = "Ray actors generate the load" if self.ray else f"{', '.join(held)} run in one process"
            return WorkerChoice(1, "auto", f"one process: {why}")
        return choose_workers(self.loads, os.cpu_count() or 1, cpu_affinity())

    def worker_count(self, in_process_target: bool = False, prompts: Any = None) -> int:
        """How many workers generate the load (``auto`` resolved: :meth:`worker_choice`)."""
        return self.worker_choice(in_process_target, prompts).workers


def check_workers(workers: Workers) -> None:
    if workers == "auto":
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be a whole number >= 1 or 'auto' (got {workers!r})")


def parse_workers(text: str) -> Workers:
    """The ``--workers`` option's value: ``N`` or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        workers = int(text)
    except ValueError:
        raise ConfigError(f"--workers takes a whole number or 'auto' (got {text!r})") from None
    check_workers(workers)
    return workers


@dataclass(frozen=True)
class WorkerChoice:
    """How many processes generate a run's load, what was asked, and why (the run's
    header prints ``reason``; results record all three)."""

    workers: int
    requested: Workers
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "requested": self.requested, "reason": self.reason}


def cpu_affinity() -> int | None:
    """Cores this process may run on (None: the platform does not say)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cores(cpu_count: int, affinity: int | None) -> int:
    """Cores loadgen may use: those its affinity allows (else all), one left for the system
    where there are at least 4."""
    cores = max(1, min(cpu_count, affinity) if affinity else cpu_count)
    return cores - 1 if cores >= 4 else cores


def choose_workers(loads: Sequence[Load], cpu_count: int,
                   affinity: int | None) -> WorkerChoice:
    """``workers="auto"``, as a pure function of the machine and the load: one process up
    to :data:`STREAMS_PER_WORKER` concurrent streams (closed loop, or an open loop's
    in-flight cap) or :data:`ARRIVALS_PER_S_PER_WORKER` arrivals/s (uncapped open loop) in
    the heaviest level, then
    one worker per budget, at most :func:`usable_cores`."""
    needed, heaviest = 1, ""
    for load in loads:
        if isinstance(load, ConstantConcurrency):
            need, label = -(-load.concurrency // STREAMS_PER_WORKER), f"concurrency {load.concurrency}"
        elif getattr(load, "max_in_flight", None):  # capped: at most that many streams
            need = -(-load.max_in_flight // STREAMS_PER_WORKER)
            label = f"{load.max_in_flight} in flight"
        elif getattr(load, "rate", None):
            need = int(-(-load.rate // ARRIVALS_PER_S_PER_WORKER))
            label = f"rate {load.rate:g}/s"
        else:
            continue
        if need > needed or not heaviest:
            needed, heaviest = max(needed, need), label
    cores = usable_cores(cpu_count, affinity)
    where = (f"{cores} usable core{'s' * (cores > 1)}"
             + (f" of {cpu_count}" if cores != cpu_count else ""))
    if needed == 1:
        return WorkerChoice(1, "auto", f"one process: {heaviest or 'the load'} is within one "
                            f"process's budget ({STREAMS_PER_WORKER} streams)")
    workers = min(cores, needed)
    if workers == 1:
        return WorkerChoice(1, "auto", f"one process: {heaviest} would take {needed} but "
                            f"loadgen may use {where}")
    short = f", of {needed} wanted" if workers < needed else ""
    return WorkerChoice(workers, "auto", f"{workers} workers: {heaviest} is more than one "
                        f"process's budget ({STREAMS_PER_WORKER} streams); {where}{short}")


def auto_workers(loads: Sequence[Load], cores: int, affinity: int | None = None) -> int:
    """The worker count of :func:`choose_workers`."""
    return choose_workers(loads, cores, affinity).workers


__all__ = ["RunConfig", "TargetConfig", "DEFAULT_REQUESTS", "default", "parse_workers",
           "auto_workers", "choose_workers", "WorkerChoice", "ArrivalRate", "ConstantConcurrency", "StopRule"]
