"""One typed description of a run: what the CLI, the API, MCP and scenarios build, and
what every worker process (or Ray actor) receives.

A run is described by frozen dataclasses, one per concept: :class:`TargetSpec` (where),
:class:`~loadgen.config.RequestOptions` and :class:`~loadgen.config.Timeouts` (each
request), :class:`~loadgen.load.Levels` (the load levels), :class:`~loadgen.load.StopRule`
(when a level ends), :class:`~loadgen.workload.settings.WorkloadSettings` (prompts,
datasets, traces), :class:`~loadgen.measurement.Measurement` (SLOs, exports, profile) and
:class:`RunConfig` (processes, sampling).
Every option is one field of one of them, declared with :func:`loadgen.option.option`;
:data:`RUN_PARTS` lists them in order and :func:`run_options` flattens them, so the front
doors (CLI, MCP ``start_run``, scenario ``request:``, API keywords) are generated from the
one list and :func:`build_run` turns any front door's values into a RunConfig.
Every part is a frozen dataclass of plain values: a RunConfig pickles.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

from .cloudwatch_settings import CloudWatchSettings
from .config import RequestOptions, Timeouts
from .errors import ConfigError
from .load import (
    DEFAULT_REQUESTS,
    STREAMS_PER_WORKER,
    ArrivalRate,
    ConstantConcurrency,
    Levels,
    Load,
    StopRule,
)
from .machine import cpu_affinity, usable_cores  # the machine's facts (re-exported)
from .measurement import Measurement
from .option import OptionField, default, option, option_fields
from .targetspec import SIMULATOR, TargetSpec, target_kind
from .workload.prompts import PromptSource
from .workload.settings import WorkloadSettings

Workers = Union[int, str]  # a count, or "auto"
TargetConfig = TargetSpec  # its earlier name


@dataclass(frozen=True)
class RunConfig:
    """A whole run: target, request options, prompts, load levels and their stop rule.

    ``workers``: processes generating the load (``"auto"``, the default: one process up
    to its budget, :func:`choose_workers`; 1 = this process always). ``ray``: a Ray cluster address (``auto``,
    ``local`` or ``ray://...``) to run the workers as Ray actors instead of processes.
    """

    loads: tuple[Load, ...]
    stop: StopRule
    target: TargetSpec = TargetSpec()
    options: RequestOptions = RequestOptions()
    prompts: PromptSource | None = None  # None: the workload's (synthetic, dataset, trace)
    workload: WorkloadSettings = WorkloadSettings()
    measurement: Measurement = Measurement()
    # None (or 0): don't sample vLLM /metrics
    server_metrics_interval_s: float | None = option(
        1.0, "Measurement and output", "vLLM HTTP targets: sample /metrics every S seconds "
        "during each level (0: off).", metavar="S", low=0,
        flag="--server-metrics-interval")
    workers: Workers = option("auto", "Load generator processes", "Worker processes "
                              "generating the load. auto: one process up to 256 streams, then "
                              "one per 256, at most the cores loadgen may use (one left for "
                              "the system from 4 cores); the header says what was chosen and "
                              "why. 1: always one process. Results are merged into one file.",
                              metavar="N|auto", convert=lambda v: parse_workers(v))
    ray: str | None = option(None, "Load generator processes", "Generate the load with Ray "
                             "actors: 'auto' (the cluster the environment points at), 'local' "
                             "(start one) or ray://HOST:PORT. Needs loadgen[ray].",
                             metavar="ADDRESS")
    cloudwatch: CloudWatchSettings = CloudWatchSettings()  # sagemaker:// targets
    quiet_gc: bool = option(True, "Load generator processes", "While a level is measured, "
                            "freeze what setup allocated out of the garbage collector's walks "
                            "and raise its thresholds for the level's size; restored after "
                            "each level (--no-quiet-gc: leave the collector alone).",
                            negatable=True)

    def __post_init__(self) -> None:
        if not self.loads:
            raise ConfigError("give at least one load level (--concurrency or --rate)")
        object.__setattr__(self, "loads", tuple(self.loads))
        if not self.server_metrics_interval_s:
            object.__setattr__(self, "server_metrics_interval_s", None)
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
        prompts = prompts if prompts is not None else self.prompts
        traced = self.workload.trace or (prompts is not None
                                         and not isinstance(prompts, PromptSource))
        return (["--trace"] if traced else []) + self.measurement.one_process_only

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
            why = ("Ray actors generate the load" if self.ray
                   else f"{', '.join(held)} run in one process")
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


def parse_workers(text: str | int) -> Workers:
    """The ``--workers`` option's value: ``N`` or ``auto`` (a number may come as one)."""
    if not isinstance(text, str):
        check_workers(text)
        return text
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


def choose_workers(loads: Sequence[Load], cpu_count: int,
                   affinity: int | None) -> WorkerChoice:
    """``workers="auto"``, as a pure function of the machine and the load: one process while
    the heaviest level is within one process's budget (each load says what it needs:
    :data:`~loadgen.load.STREAMS_PER_WORKER` streams, or
    :data:`~loadgen.load.ARRIVALS_PER_S_PER_WORKER` arrivals/s), then one worker per
    budget, at most :func:`usable_cores`."""
    needed, heaviest = 1, ""
    for load in loads:
        need = load.workers_needed()
        if need > needed or not heaviest:
            needed, heaviest = max(needed, need), load.label
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


# The run description's parts, in --help order within each group: (where in the RunConfig
# build the values go, the dataclass declaring them). A new option is a new field on one.
RUN_PARTS: tuple[tuple[str, type], ...] = (
    ("target", TargetSpec), ("cloudwatch", CloudWatchSettings), ("options", RequestOptions),
    ("levels", Levels),
    ("stop", StopRule), ("workload", WorkloadSettings), ("timeouts", Timeouts),
    ("measurement", Measurement), ("run", RunConfig))


def run_options() -> list[OptionField]:
    """Every run option, flattened: the list each front door is generated from."""
    fields = [f for part, cls in RUN_PARTS for f in option_fields(part, cls)]
    keys = [f.key for f in fields]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:  # a concept declared twice
        raise AssertionError(f"run options declared twice: {duplicated}")
    return fields


def option_defaults() -> dict[str, Any]:
    """Every run option's public default, by key."""
    return {f.key: f.public_default() for f in run_options()}


def build_run(values: Mapping[str, Any] | None = None, *, where: str = "option",
              **more: Any) -> RunConfig:
    """The :class:`RunConfig` that public option values describe (keys as in
    :func:`run_options`; missing ones take their defaults). Each value is checked against
    its field's type, bounds and choices; an unknown key is a one-line error naming the
    accepted ones. A trace replaces the levels with its replay."""
    given = {**(values or {}), **more}
    fields = run_options()
    known = {f.key for f in fields}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"unknown {where}(s): {', '.join(unknown)} (accepted: "
                          f"{', '.join(sorted(known))})")
    parts: dict[str, dict[str, Any]] = {part: {} for part, _ in RUN_PARTS}
    for f in fields:
        if f.key in given:
            parts[f.part][f.name] = f.value(given[f.key], f.flag if where == "option" else None)
    workload = WorkloadSettings(**parts["workload"])
    measurement = Measurement(**parts["measurement"])
    stop = StopRule(**parts["stop"])
    loads = choose_levels(Levels(**parts["levels"]), workload, measurement, stop)
    options = RequestOptions(**parts["options"], timeouts=Timeouts(**parts["timeouts"]))
    return RunConfig(loads=tuple(loads), stop=stop,
                     target=TargetSpec(**parts["target"]), options=options,
                     workload=workload, measurement=measurement,
                     cloudwatch=CloudWatchSettings(**parts["cloudwatch"]), **parts["run"])


def choose_levels(levels: Levels, workload: WorkloadSettings, measurement: Measurement,
                  stop: StopRule) -> list[Load]:
    """The run's load levels: a trace's replay, a profile's first (bound) levels, or the
    level options' own; one-line errors for options that do not go with a trace or profile."""
    given = bool(levels.concurrency or levels.rate)
    if workload.trace and measurement.profile:
        raise ConfigError("use --trace or --profile, not both")
    if workload.trace:
        if given:
            raise ConfigError("--trace replays the trace's own schedule; drop "
                              "--concurrency/--rate")
        if stop.ramp_up_s:
            raise ConfigError("--ramp-up does not apply to --trace (the trace has its own "
                              "timing)")
        if stop.warmup:
            raise ConfigError("--warmup does not apply to --trace (the trace is replayed once)")
        return [workload.trace_load()]
    if measurement.rate_search and measurement.profile != "slo-search":
        raise ConfigError("--rate-search applies to --profile slo-search")
    if measurement.profile == "slo-search":  # the first probe: the level options' first
        loads = levels.loads(workload.seed)
        if len(loads) > 1:
            raise ConfigError("--profile slo-search takes one --concurrency (or --rate with "
                              "--rate-search) to start from, not a list")
        from .knee import knee_search

        knee_search(measurement, loads)  # one-line errors: no --slo, bad precision, ...
        return loads
    if measurement.profile:
        if given:
            raise ConfigError("--profile saturation chooses its own levels; drop "
                              "--concurrency/--rate")
        from .saturation import bound_levels

        return bound_levels(measurement.saturation_concurrency)
    return levels.loads(workload.seed)


__all__ = ["RunConfig", "TargetSpec", "TargetConfig", "CloudWatchSettings", "DEFAULT_REQUESTS", "default",
           "parse_workers", "auto_workers", "choose_workers", "WorkerChoice", "usable_cores",
           "cpu_affinity", "ArrivalRate", "ConstantConcurrency", "StopRule",
           "RUN_PARTS", "run_options", "option_defaults", "build_run", "SIMULATOR",
           "target_kind"]
