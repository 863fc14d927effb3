"""The runner: executes one load level against a target and folds records into metrics.

Every task has an owner (an ``asyncio.TaskGroup``). Sends are scheduled at
absolute times; the runner never sleeps "after work". A level ends when its
:class:`~loadgen.load.StopRule` says so, or when :meth:`RunControl.stop` is
called (Ctrl-C): no new request starts, in-flight requests get the graceful-stop
deadline (none after Ctrl-C) and are then cancelled and counted incomplete.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from asyncio_throttle import Throttler

from .load import ArrivalRate, ConstantConcurrency, Load, StopRule
from .metrics import LevelMetrics
from .record import Prompt, RequestRecord
from .selfcheck import ClientMonitor, ClientReport
from .targets.base import PreparedRequest, PreparingTarget, Target

if sys.version_info < (3, 11):  # pragma: no cover
    from taskgroup import TaskGroup
else:
    from asyncio import TaskGroup

ProgressFn = Callable[[dict], None]
# A request built ahead of its due time: prompt, record, and the target's prepared request.
_Upcoming = tuple[Prompt, RequestRecord, "PreparedRequest | None"]


class Prompts(Protocol):
    """Where prompts come from (:class:`~loadgen.prompts.PromptSource`): by request index."""

    def prompt(self, index: int) -> Prompt: ...


class Watcher(Protocol):
    """Something that observes a level while it runs: ``run()`` until cancelled."""

    async def run(self) -> None: ...


class RunControl:
    """Lets the caller (CLI signal handler, user code) stop a run early; the run still reports."""

    def __init__(self) -> None:
        self.stopped = False
        self._listeners: list[Callable[[], None]] = []

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            for listener in list(self._listeners):
                listener()

    def on_stop(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` (from the event loop's thread) when :meth:`stop` is called.
        Returns a function that removes the listener."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn)


@dataclass
class LevelResult:
    load: Load
    metrics: LevelMetrics
    duration_s: float  # measured window: level start to last measured completion
    client: ClientReport
    partial: bool = False  # stopped early by RunControl
    records: list[RequestRecord] | None = None  # only with keep_records
    server: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0  # the measured window, perf_counter_ns (duration_s = end − start)
    end_ns: int = 0
    workers: list[dict[str, Any]] | None = None  # per-worker facts when workers ran the level
    # The target's connection counters over the measured phase (opened, reconnects, ...).
    connections: dict[str, int] = field(default_factory=dict)


@dataclass
class RequestIds:
    """Run-wide request counter: ids are unique across levels and warm-ups."""

    value: int = 0


@dataclass(frozen=True)
class Share:
    """The part of every level this process generates: worker ``index`` of ``count``.

    Open loop: arrival k of the level's global schedule is this worker's when
    k mod count == index, so the union over workers is the one-process schedule.
    This process's k-th request of the run (0-based) has the run-wide index
    ``index + k * count``: it picks the prompt and the request id, so workers never
    share a prompt or an id and no data crosses processes.
    """

    index: int = 0
    count: int = 1

    def arrivals(self, offsets: Iterable[int]) -> Iterator[int]:
        return itertools.islice(offsets, self.index, None, self.count)

    def request_index(self, local: int) -> int:
        return self.index + local * self.count


class _Level:
    """State of one running level. Created and discarded by :func:`run_level`."""

    def __init__(self, target: Target, load: Load, stop: StopRule, prompts: Prompts,
                 control: RunControl, measured: bool, keep_records: bool,
                 ids: RequestIds, share: Share, metrics: LevelMetrics | None = None) -> None:
        self.target = target
        self.ids = ids
        self.share = share
        self.load = load
        self.prompts = prompts
        self.control = control
        self.limit = (stop.requests if measured else stop.warmup) or None
        self.duration_s = stop.duration_s if measured else None
        self.metrics = metrics if metrics is not None else LevelMetrics()
        self.records: list[RequestRecord] | None = [] if keep_records else None
        self.issued = 0
        self.in_flight = 0
        self.stopping = False
        self.last_end_ns = 0
        self._stop_event = asyncio.Event()
        self._grace_s = stop.graceful_stop_s
        # Checked once: isinstance against a runtime Protocol costs ~100 µs.
        self._preparing = isinstance(target, PreparingTarget)

    # -- stopping -------------------------------------------------------------------------
    def begin_stop(self, grace_s: float | None = None) -> None:
        if grace_s is not None:
            self._grace_s = min(self._grace_s, grace_s)
        self.stopping = True
        self._stop_event.set()

    def _may_start(self) -> bool:
        return not self.stopping and (self.limit is None or self.issued < self.limit)

    async def cancel_after_grace(self, tasks: set[asyncio.Task]) -> None:
        """After a stop, give in-flight requests the grace period, then cancel them."""
        await self._stop_event.wait()
        pending = [t for t in tasks if not t.done()]
        if pending and self._grace_s > 0:
            _, pending = await asyncio.wait(pending, timeout=self._grace_s)
        for task in pending:
            task.cancel()

    # -- requests -------------------------------------------------------------------------
    async def _send(self, prompt: Prompt, rec: RequestRecord,
                    prepared: PreparedRequest | None = None,
                    on_sent: Callable[[], None] | None = None) -> None:
        self.in_flight += 1
        try:
            if prepared is not None:
                await self.target.send_prepared(prepared, rec, on_sent)  # type: ignore[attr-defined]
            else:
                await self.target.send(prompt, rec)
        except asyncio.CancelledError:
            rec.incomplete = True
            rec.end_ns = rec.end_ns or time.perf_counter_ns()
            self._finish(rec)
            raise
        except Exception as exc:  # a target bug must not kill the run: it is data too
            rec.fail("client_error", f"{type(exc).__name__}: {exc}"[:300], time.perf_counter_ns())
        finally:
            self.in_flight -= 1
        self._finish(rec)

    def _finish(self, rec: RequestRecord) -> None:
        self.last_end_ns = max(self.last_end_ns, rec.end_ns)
        self.metrics.add(rec)
        if self.records is not None:
            self.records.append(rec)

    def _next_prompt(self) -> tuple[Prompt, int]:
        """The next prompt of this process's share, and its request id (run-wide index + 1)."""
        index = self.share.request_index(self.ids.value)
        self.ids.value += 1
        return self.prompts.prompt(index), index + 1

    def _new_record(self, intended_ns: int) -> tuple[Prompt, RequestRecord]:
        self.issued += 1
        prompt, request_id = self._next_prompt()
        return prompt, RequestRecord(intended_ns=intended_ns, input_tokens=prompt.input_tokens,
                                     tag=prompt.tag, request_id=request_id)

    def _prepare_next(self) -> _Upcoming:
        """A stream's next request, built before it is due: prompt, record (its id is on the
        wire) and, when the target can, the request itself (body, signature, bytes). It is
        counted as issued only when it starts; one left over at the stop is never sent."""
        prompt, request_id = self._next_prompt()
        rec = RequestRecord(input_tokens=prompt.input_tokens, tag=prompt.tag,
                            request_id=request_id)
        prepared = None
        if self._preparing:
            try:
                prepared = self.target.prepare(prompt, rec)
            except Exception:  # noqa: BLE001 - sent unprepared, where a failure becomes data
                prepared = None
        return prompt, rec, prepared

    # -- load models ----------------------------------------------------------------------
    async def closed_loop(self, load: ConstantConcurrency, t0: int,
                          tg: TaskGroup) -> set[asyncio.Task]:
        throttler = Throttler(1, period=1 / load.max_rate) if load.max_rate else None

        async def worker() -> None:
            # A stream's next request is due the moment its previous response ended: any
            # delay after that (task wake-up, building, writing) is the client's, and counts.
            # So the next request is built while the current one is in flight (right after
            # its bytes were written), not after it ends.
            due = t0
            upcoming: _Upcoming | None = None
            loop = asyncio.get_running_loop()

            def build_next() -> None:
                nonlocal upcoming
                if upcoming is None and not self.stopping and (
                        self.limit is None or self.issued < self.limit):
                    upcoming = self._prepare_next()

            def after_write() -> None:
                # Not now: other streams of the same burst are waiting to write theirs.
                loop.call_soon(build_next)

            while self._may_start():
                if throttler is not None:
                    await throttler.acquire()
                    if not self._may_start():
                        return
                    due = max(due, time.perf_counter_ns())  # the cap's delay is intended
                prompt, rec, prepared = upcoming or self._prepare_next()
                upcoming = None
                self.issued += 1
                rec.intended_ns = due
                rec.start_ns = time.perf_counter_ns()
                await self._send(prompt, rec, prepared, after_write)
                due = rec.end_ns or time.perf_counter_ns()

        return {tg.create_task(worker()) for _ in range(load.concurrency)}

    async def open_loop(self, load: ArrivalRate, t0: int, tg: TaskGroup) -> set[asyncio.Task]:
        """Send request *i* at ``t0 + offset_i``; never block the event loop.

        When the schedule is behind (the rate exceeds what the client can send), due requests
        are sent at once, but the loop still yields after each one: the stop timer, Ctrl-C and
        finishing requests must get their turn. The in-flight cap counts requests handed to the
        event loop (tasks not yet done), not requests on the wire: a request that has not
        started yet is in flight too, so a backlog can never grow past the cap.
        """
        tasks: set[asyncio.Task] = set()
        stop_wait = asyncio.ensure_future(self._stop_event.wait())
        try:
            for offset in self.share.arrivals(load.offsets_ns()):
                if not self._may_start():
                    break
                due = t0 + offset
                delay = due - time.perf_counter_ns()
                if delay > 0:
                    await asyncio.wait((stop_wait,), timeout=delay / 1e9)
                else:
                    await asyncio.sleep(0)  # behind schedule: still let the loop run
                if self.stopping:
                    break
                if load.max_in_flight is not None and len(tasks) >= load.max_in_flight:
                    self.metrics.add_dropped()
                    self.issued += 1
                    continue
                prompt, rec = self._new_record(due)
                task = tg.create_task(self._send(prompt, rec))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            stop_wait.cancel()
        return tasks


async def _fold_in_slices(metrics: LevelMetrics, interval_s: float = 0.05,
                          slice_requests: int = 4, pause_s: float = 0.001) -> None:
    """Move finished requests' values into the histograms off the request path: a few
    requests at a time with a pause between slices, so a burst of sends or reads never
    waits behind more than one short slice of histogram work (hdrh records in pure Python)."""
    while True:
        await asyncio.sleep(interval_s)
        while metrics.fold(slice_requests):
            await asyncio.sleep(pause_s)


async def _progress_ticker(level: _Level, on_progress: ProgressFn, t0: int) -> None:
    while True:
        await asyncio.sleep(0.5)
        snap = level.metrics.statistics()
        snap["elapsed_s"] = (time.perf_counter_ns() - t0) / 1e9
        snap["in_flight"] = level.in_flight
        # The live histograms, for callers that show percentiles so far (loadgen mcp's
        # run_status): reading a percentile costs milliseconds, so only on demand.
        snap["metrics"] = level.metrics
        on_progress(snap)


async def _wait_until(level: _Level, start_ns: int) -> None:
    """Sleep until the shared start instant (workers start together); a stop cuts it short."""
    delay = (start_ns - time.perf_counter_ns()) / 1e9
    if delay > 0 and not level.stopping:
        try:
            await asyncio.wait_for(level._stop_event.wait(), delay)
        except asyncio.TimeoutError:
            pass


async def _run_phase(level: _Level, on_progress: ProgressFn | None,
                     watchers: Sequence[Watcher] = (), start_ns: int | None = None) -> int:
    """Run one phase (warm-up or measured); return its start time in ns.

    ``watchers`` run alongside the load (``await w.run()`` until cancelled at the end).
    ``start_ns``: begin at this ``perf_counter_ns`` instant (CLOCK_MONOTONIC is system-wide,
    so every worker process of a run shares it); None: now.
    """
    loop = asyncio.get_running_loop()
    forget = level.control.on_stop(lambda: level.begin_stop(grace_s=0))
    if level.control.stopped:
        level.begin_stop(grace_s=0)
    if start_ns is not None:
        await _wait_until(level, start_ns)
    t0 = start_ns if start_ns is not None else time.perf_counter_ns()
    timer = None
    if level.duration_s is not None:
        elapsed_s = (time.perf_counter_ns() - t0) / 1e9
        timer = loop.call_later(max(0.0, level.duration_s - elapsed_s), level.begin_stop)
    try:
        async with TaskGroup() as tg:
            helpers = [tg.create_task(w.run()) for w in watchers]
            helpers.append(tg.create_task(_fold_in_slices(level.metrics)))
            if on_progress:
                helpers.append(tg.create_task(_progress_ticker(level, on_progress, t0)))
            if isinstance(level.load, ConstantConcurrency):
                tasks = await level.closed_loop(level.load, t0, tg)
            else:
                tasks = await level.open_loop(level.load, t0, tg)
            helpers.append(tg.create_task(level.cancel_after_grace(tasks)))
            if tasks:
                await asyncio.wait(tasks)
            for helper in helpers:
                helper.cancel()
    finally:
        if timer is not None:
            timer.cancel()
        forget()
    return t0


@dataclass(frozen=True)
class LevelRun:
    """How one process runs its part of a level (defaults: all of it, in this process)."""

    control: RunControl = field(default_factory=RunControl)
    ids: RequestIds = field(default_factory=RequestIds)
    share: Share = Share()
    keep_records: bool = False


async def warm_up(target: Target, load: Load, stop: StopRule, prompts: Prompts,
                  how: LevelRun, start_ns: int | None = None) -> None:
    """Before a level: open the connections it needs (never inside a measured TTFT), then
    send ``stop.warmup`` requests (this process's share of them), excluded from metrics."""
    open_connections = getattr(target, "open_connections", None)
    if open_connections is not None and not how.control.stopped:
        await open_connections(connections_needed(load))
    if stop.warmup and not how.control.stopped:
        warm = _Level(target, load, stop, prompts, how.control, False, False, how.ids, how.share)
        await _run_phase(warm, None, start_ns=start_ns)


async def measure(target: Target, load: Load, stop: StopRule, prompts: Prompts, how: LevelRun,
                  *, on_progress: ProgressFn | None = None, watchers: Sequence[Watcher] = (),
                  start_ns: int | None = None, metrics: LevelMetrics | None = None
                  ) -> LevelResult:
    """The measured phase of a level. ``metrics``: fold into this (a worker reads it live)."""
    level = _Level(target, load, stop, prompts, how.control, True, how.keep_records, how.ids,
                   how.share, metrics)
    monitor = ClientMonitor()
    before = _connection_counters(target)
    t0 = await _run_phase(level, on_progress, (monitor, *watchers), start_ns)
    end = max(level.last_end_ns, t0)
    after = _connection_counters(target)
    send_lag = level.metrics.summary_of("send_lag_ms")
    return LevelResult(load=load, metrics=level.metrics, duration_s=(end - t0) / 1e9,
                       client=monitor.report(send_lag_p99_ms=send_lag["p99"]),
                       partial=how.control.stopped, records=level.records, start_ns=t0,
                       end_ns=end,
                       connections={k: v - before.get(k, 0) for k, v in after.items()})


async def run_level(target: Target, load: Load, stop: StopRule, prompts: Prompts, *,
                    control: RunControl | None = None, keep_records: bool = False,
                    on_progress: ProgressFn | None = None,
                    ids: RequestIds | None = None,
                    watchers: Sequence[Watcher] = ()) -> LevelResult:
    """Warm up (if asked), then measure one level. Never raises for request failures.

    ``watchers`` (e.g. a server-metrics sampler) run alongside the measured phase, next to
    the client self-check.
    """
    how = LevelRun(control or RunControl(), ids or RequestIds(), keep_records=keep_records)
    await warm_up(target, load, stop, prompts, how)
    return await measure(target, load, stop, prompts, how, on_progress=on_progress,
                         watchers=watchers)


def connections_needed(load: Load) -> int:
    """Connections a level will use at once: its concurrency, its in-flight cap, or (open
    loop without a cap) one second's worth of arrivals, at most 256."""
    if isinstance(load, ConstantConcurrency):
        return load.concurrency
    if load.max_in_flight is not None:
        return load.max_in_flight
    return max(1, min(256, math.ceil(load.rate)))


_COUNTERS = ("connections_opened", "reconnects", "closed_by_server", "connect_failures")


def _connection_counters(target: Target) -> dict[str, int]:
    statistics = getattr(target, "statistics", None)
    if statistics is None:
        return {}
    snapshot = statistics()
    return {k: snapshot[k] for k in _COUNTERS if k in snapshot}
