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

# What one worker process is asked to drive at most when ``workers="auto"`` sizes a run.
STREAMS_PER_WORKER = 256
ARRIVALS_PER_S_PER_WORKER = 50.0

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

    ``workers``: processes generating the load (1 = this process, today's behaviour;
    ``"auto"`` = :func:`auto_workers`). ``ray``: a Ray cluster address (``auto``,
    ``local`` or ``ray://...``) to run the workers as Ray actors instead of processes.
    """

    loads: tuple[Load, ...]
    stop: StopRule
    target: TargetConfig = TargetConfig()
    options: RequestOptions = RequestOptions()
    prompts: PromptSource | None = None  # None: the workload's (synthetic, dataset, trace)
    workload: WorkloadSettings = WorkloadSettings()
    server_metrics_interval_s: float | None = 1.0  # None: don't sample vLLM /metrics
    workers: Workers = 1
    ray: str | None = None

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
        workload = self.workload
        unsplittable = [(workload.trace or not isinstance(prompts, PromptSource), "--trace"),
                        (workload.profile == "saturation", "--profile saturation")]
        given = [flag for bad, flag in unsplittable if bad]
        if given:
            raise ConfigError(f"{', '.join(given)} run in one process only: drop "
                              "--workers/--ray (or use --workers 1)")
        return dataclasses.replace(self, prompts=prompts.salted())

    def worker_count(self, cores: int | None = None) -> int:
        """How many workers generate the load (``auto`` resolved against ``cores``)."""
        if self.workers == "auto":
            return auto_workers(self.loads, cores if cores is not None else os.cpu_count() or 1)
        return int(self.workers)


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


def auto_workers(loads: Sequence[Load], cores: int) -> int:
    """min(cores − 1, what the heaviest level needs), at least 1.

    A level needs one worker per :data:`STREAMS_PER_WORKER` concurrent streams (closed
    loop) or per :data:`ARRIVALS_PER_S_PER_WORKER` arrivals/s (open loop).
    """
    needed = 1
    for load in loads:
        if isinstance(load, ConstantConcurrency):
            need = -(-load.concurrency // STREAMS_PER_WORKER)
        else:
            need = int(-(-load.rate // ARRIVALS_PER_S_PER_WORKER))
        needed = max(needed, need)
    return max(1, min(cores - 1, needed))


__all__ = ["RunConfig", "TargetConfig", "DEFAULT_REQUESTS", "default", "parse_workers",
           "auto_workers", "ArrivalRate", "ConstantConcurrency", "StopRule"]
