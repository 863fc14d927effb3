"""The level runner: one level, from opening its connections to its :class:`LevelResult`.

:func:`run_level` = :func:`warm_up` (open the connections the level needs, send the warm-up
requests) then :func:`measure` (run the load model with the client self-check and any
watchers alongside, fold metrics off the request path, report). Worker processes call
``warm_up`` and ``measure`` themselves, each starting at an instant the parent hands out.

A phase ends when its load model has nothing left to start (the request limit, the stop
deadline) and its requests are done, or at a stop (the deadline, Ctrl-C): no new request
starts, requests in flight get the graceful-stop period (none after Ctrl-C) and are then
cancelled and counted incomplete.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from ..clock import MONOTONIC, Clock, first_of
from ..gcpolicy import quiet_gc as gc_off_the_measurement
from ..load import CLOSED_LOOP, Load, StopRule, connections_needed
from ..metrics import LevelMetrics
from ..record import RequestRecord
from ..selfcheck import ClientMonitor, ClientReport
from ..slo import SLO, SLOCounts
from ..targets.base import Target
from .closed_loop import first_requests, start_streams
from .control import RunControl
from .level import Level, LevelRun, Prompts
from .open_loop import send_on_schedule
from .share import RequestIds
from .tally import RecordSink

from .._compat import TaskGroup

ProgressFn = Callable[[dict], None]
PROGRESS_EVERY_NS = 500_000_000


class Watcher(Protocol):
    """Something that observes a level while it runs: ``run()`` until cancelled."""

    async def run(self) -> None: ...


@dataclass
class LevelResult:
    load: Load
    metrics: LevelMetrics
    duration_s: float  # measured window: level start to last measured completion
    client: ClientReport
    partial: bool = False  # stopped early by RunControl
    records: list[RequestRecord] | None = None  # only with keep_records
    server: dict[str, Any] = field(default_factory=dict)
    slo: SLOCounts | None = None  # with SLOs: good requests and per-SLO passes
    turns: dict[int, LevelMetrics] = field(default_factory=dict)  # multi-turn: per turn
    ramp_up_s: float = 0.0
    ramp_excluded: int = 0  # requests started during the ramp-up (sent, not measured)
    start_ns: int = 0  # the measured window, perf_counter_ns (duration_s = end − start)
    end_ns: int = 0
    workers: list[dict[str, Any]] | None = None  # per-worker facts when workers ran the level
    # The target's connection counters over the measured phase (opened, reconnects, ...).
    connections: dict[str, int] = field(default_factory=dict)
    # Why requests counted incomplete were (besides a stop): {"worker_died": n} when a
    # worker process died with requests it had started and not reported.
    incomplete_reasons: dict[str, int] = field(default_factory=dict)
    # sagemaker:// targets: the endpoint's own CloudWatch metrics over the level
    # (loadgen.aws.level_metrics); None for other targets.
    cloudwatch: dict[str, Any] | None = None
    # The client's per-second rows and where server series sit on their axis
    # (loadgen.timeline); None when workers generated the level.
    timeline: dict[str, Any] | None = None


async def run_level(target: Target, load: Load, stop: StopRule, prompts: Prompts, *,
                    control: RunControl | None = None, keep_records: bool = False,
                    on_progress: ProgressFn | None = None,
                    ids: RequestIds | None = None,
                    watchers: Sequence[Watcher] = (), slos: Sequence[SLO] = (),
                    sinks: Sequence[RecordSink] = (), clock: Clock = MONOTONIC,
                    quiet_gc: bool = True) -> LevelResult:
    """Warm up (if asked), then measure one level. Never raises for request failures.

    ``watchers`` (e.g. a server-metrics sampler) run alongside the measured phase, next to
    the client self-check. ``slos`` are evaluated on every measured request; ``sinks``
    (exports) see every measured request as it finishes. ``clock``: tests pass a virtual one.
    ``quiet_gc``: garbage collection off the measurement (:mod:`loadgen.gcpolicy`).
    """
    how = LevelRun(control or RunControl(), ids or RequestIds(), keep_records=keep_records,
                   slos=tuple(slos), sinks=tuple(sinks), clock=clock, quiet_gc=quiet_gc)
    await warm_up(target, load, stop, prompts, how)
    return await measure(target, load, stop, prompts, how, on_progress=on_progress,
                         watchers=watchers)


async def warm_up(target: Target, load: Load, stop: StopRule, prompts: Prompts,
                  how: LevelRun, start_ns: int | None = None) -> None:
    """Before a level: open the connections it needs (never inside a measured TTFT), then
    send ``stop.warmup`` requests (this process's share of them), excluded from metrics."""
    open_connections = getattr(target, "open_connections", None)
    if open_connections is not None and not how.control.stopped:
        await open_connections(connections_needed(load))
    if stop.warmup and not how.control.stopped:
        await run_phase(Level(target, load, stop, prompts, how, measured=False),
                        start_ns=start_ns)


async def measure(target: Target, load: Load, stop: StopRule, prompts: Prompts, how: LevelRun,
                  *, on_progress: ProgressFn | None = None, watchers: Sequence[Watcher] = (),
                  start_ns: int | None = None, metrics: LevelMetrics | None = None,
                  slo: SLOCounts | None = None, whole: Load | None = None) -> LevelResult:
    """The measured phase of a level. ``metrics`` (and ``slo``, with SLOs): fold into
    these (a worker reads them live). ``whole``: the whole level, when ``load`` is this
    worker's share of it (ramp-up offsets)."""
    level = Level(target, load, stop, prompts, how, measured=True, metrics=metrics,
                  slo=slo, whole=whole)
    with gc_off_the_measurement(load, how.quiet_gc):  # its collection is not the level's CPU
        monitor = ClientMonitor(clock=how.clock)
        before = _connection_counters(target)
        t0 = await run_phase(level, on_progress, (monitor, *watchers), start_ns)
    tally = level.tally
    start = t0 + level.ramp_ns  # the measured window opens when the ramp-up ends
    end = max(tally.last_end_ns, start)
    after = _connection_counters(target)
    send_lag = tally.metrics.summary_of("send_lag_ms")
    return LevelResult(load=load, metrics=tally.metrics, duration_s=(end - start) / 1e9,
                       client=monitor.report(send_lag_p99_ms=send_lag["p99"],
                                             ttft_p50_ms=tally.metrics.summary_of("ttft_ms")["p50"],
                                             workers=how.share.count),
                       partial=how.control.stopped, records=tally.records, start_ns=start,
                       end_ns=end,
                       connections={k: v - before.get(k, 0) for k, v in after.items()},
                       slo=tally.slo, turns=tally.turns,
                       ramp_up_s=stop.ramp_up_s, ramp_excluded=level.ramp_issued)


async def run_phase(level: Level, on_progress: ProgressFn | None = None,
                    watchers: Sequence[Watcher] = (), start_ns: int | None = None) -> int:
    """Run one phase (warm-up or measured); return its start time in ns.

    ``watchers`` run alongside the load (``await w.run()`` until cancelled at the end).
    ``start_ns``: begin at this instant of the level's clock (CLOCK_MONOTONIC is
    system-wide, so every worker process of a run shares it); None: now.
    """
    control = level.how.control
    forget = control.on_stop(lambda: level.begin_stop(grace_s=0))
    if control.stopped:
        level.begin_stop(grace_s=0)
    try:
        # A closed loop's first requests are built before the phase starts (a burst of
        # C streams would otherwise build C bodies and signatures after their due time).
        firsts = (first_requests(level, level.load)
                  if level.load.loop == CLOSED_LOOP else [])
        if start_ns is not None and not level.stopping:
            # Workers start together; a stop cuts the wait short.
            await first_of(level.clock.sleep_until(start_ns), level.stopped.wait())
        level.begin(start_ns if start_ns is not None else level.clock.now_ns())
        async with TaskGroup() as tg:
            helpers = [tg.create_task(w.run()) for w in watchers]
            helpers.append(tg.create_task(_fold_in_slices(level)))
            if on_progress:
                helpers.append(tg.create_task(_progress_ticker(level, on_progress)))
            if level.deadline_ns is not None:
                helpers.append(tg.create_task(_stop_at_deadline(level)))
            tasks: set[asyncio.Task] = set()  # those carrying requests: the grace applies
            driver = _drive(level, tg, tasks, firsts)
            helpers.append(tg.create_task(_cancel_after_grace(level, driver, tasks)))
            if driver is not None:
                await asyncio.wait((driver,))  # cancelled at a stop: not an error here
            if tasks:
                await asyncio.wait(tasks)
            for helper in helpers:
                helper.cancel()
    finally:
        forget()
    return level.start_ns


def _drive(level: Level, tg: TaskGroup, tasks: set[asyncio.Task],
           firsts: list) -> asyncio.Task | None:
    """Start the level's load model: its streams (closed loop), or the task that sends on
    its schedule (open loop), which it returns.

    A closed loop's streams are created here, in this step, as they were before the engine
    was split: starting them one task later (from a driver task) changed how the first
    burst interleaves with the self-check and folding tasks, and at 256 lockstep streams
    that raised the TTFT error a user suffers from p50/p99 ~12/40 ms to ~22/80 ms
    (benchmarks/ttft_error.py, 2026-12-01) at the same CPU."""
    if level.load.loop == CLOSED_LOOP:  # the load says which loop runs it
        start_streams(level, level.load, tg, tasks, firsts)
        return None
    return tg.create_task(send_on_schedule(level, level.load, tg, tasks))


async def _stop_at_deadline(level: Level) -> None:
    await level.clock.sleep_until(level.deadline_ns or 0)
    level.begin_stop()


async def _cancel_after_grace(level: Level, driver: asyncio.Task | None,
                              tasks: set[asyncio.Task]) -> None:
    """After a stop: start nothing more, give in-flight requests the graceful-stop period,
    then cancel them (they are tallied as incomplete)."""
    await level.stopped.wait()
    if driver is not None:
        driver.cancel()
    pending = [t for t in tasks if not t.done()]
    if pending and level.grace_s > 0:
        grace_end = level.clock.now_ns() + round(level.grace_s * 1e9)
        await first_of(level.clock.sleep_until(grace_end), asyncio.wait(pending))
    for task in pending:
        task.cancel()


async def _fold_in_slices(level: Level, interval_s: float = 0.05,
                          slice_requests: int = 4, pause_s: float = 0.001) -> None:
    """Move finished requests' values into the histograms off the request path: a few
    requests at a time with a pause between slices, so a burst of sends or reads never
    waits behind more than one short slice of histogram work (hdrh records in pure Python)."""
    while True:
        await asyncio.sleep(interval_s)
        for metrics in level.tally.all_metrics():
            while metrics.fold(slice_requests):
                await asyncio.sleep(pause_s)


async def _progress_ticker(level: Level, on_progress: ProgressFn) -> None:
    due = level.start_ns
    while True:
        # Absolute ticks, but a late one never brings a burst of catch-up ticks.
        due = max(due + PROGRESS_EVERY_NS, level.clock.now_ns())
        await level.clock.sleep_until(due)
        metrics = level.tally.metrics
        snap = metrics.statistics()
        snap["elapsed_s"] = (level.clock.now_ns() - level.start_ns) / 1e9
        snap["in_flight"] = level.in_flight
        # The live histograms, for callers that show percentiles so far (loadgen mcp's
        # run_status): reading a percentile costs milliseconds, so only on demand.
        snap["metrics"] = metrics
        on_progress(snap)


_COUNTERS = ("connections_opened", "reconnects", "closed_by_server", "connect_failures",
             "sent_on_completion")


def _connection_counters(target: Target) -> dict[str, int]:
    statistics = getattr(target, "statistics", None)
    if statistics is None:
        return {}
    snapshot = statistics()
    return {k: snapshot[k] for k in _COUNTERS if k in snapshot}
