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
from typing import Any, Callable, Coroutine, Iterable, Iterator, Protocol, Sequence

from asyncio_throttle import Throttler

from .load import ArrivalRate, ConstantConcurrency, Load, StopRule, ramped
from .metrics import LevelMetrics
from .prompts import Session
from .record import Prompt, RequestRecord
from .selfcheck import ClientMonitor, ClientReport
from .slo import SLO, SLOCounts
from .targets.base import PreparedRequest, PreparingTarget, Target

if sys.version_info < (3, 11):  # pragma: no cover
    from taskgroup import TaskGroup
else:
    from asyncio import TaskGroup

ProgressFn = Callable[[dict], None]
# A request built ahead of its due time: its session (None: a single prompt), prompt,
# record, and the target's prepared request.
_Upcoming = tuple["Session | None", Prompt, RequestRecord, "PreparedRequest | None"]


class RecordSink(Protocol):
    """Something that sees every finished measured request (exports): ``add(record)``."""

    def add(self, record: RequestRecord) -> None: ...


class Prompts(Protocol):
    """Where prompts come from, by run-wide request index: a
    :class:`~loadgen.prompts.PromptSource` (the same prompt for an index in every worker
    process), or one process's :class:`~loadgen.prompts.PromptStream` (taken in order,
    with the iterator's draws and multi-turn sessions)."""

    def prompt(self, index: int) -> Prompt | Session: ...


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
    slo: SLOCounts | None = None  # with SLOs: good requests and per-SLO passes
    turns: dict[int, LevelMetrics] = field(default_factory=dict)  # multi-turn: per turn
    ramp_up_s: float = 0.0
    ramp_excluded: int = 0  # requests started during the ramp-up (sent, not measured)
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
                 ids: RequestIds, share: Share, metrics: LevelMetrics | None = None,
                 slos: Sequence[SLO] = (), sinks: Sequence[RecordSink] = ()) -> None:
        self.target = target
        self.ids = ids
        self.share = share
        self.load = load
        self.prompts = prompts
        self.control = control
        self.limit = (stop.requests_for(load) if measured else stop.warmup) or None
        self.duration_s = stop.duration_s if measured else None
        self.metrics = metrics if metrics is not None else LevelMetrics()
        self.slo = SLOCounts(slos) if slos else None
        self.sinks = sinks
        self.turn_metrics: dict[int, LevelMetrics] = {}  # multi-turn: metrics per turn
        self.records: list[RequestRecord] | None = [] if keep_records else None
        self.issued = 0
        self.in_flight = 0
        self.stopping = False
        self.last_end_ns = 0
        # Ramp-up: requests due before ``ramp_end_ns`` are sent but not measured or counted
        # towards the limit (by start time, not completion).
        self.ramp_ns = round(stop.ramp_up_s * 1e9) if measured else 0
        self.ramp_end_ns = 0  # set when the phase starts
        self.ramp_issued = 0
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
        return not self.stopping and (self.limit is None
                                      or self.issued - self.ramp_issued < self.limit)

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
        if rec.intended_ns < self.ramp_end_ns:
            return  # started during the ramp-up: not part of the level's measurement
        self.last_end_ns = max(self.last_end_ns, rec.end_ns)
        self.metrics.add(rec)
        if rec.turn is not None:
            self.turn_metrics.setdefault(rec.turn, LevelMetrics()).add(rec)
        if self.slo is not None:
            self.slo.add(rec)
        for sink in self.sinks:
            sink.add(rec)
        if self.records is not None:
            self.records.append(rec)

    def _next_index(self) -> int:
        """The run-wide index of this process's next request (its id is index + 1)."""
        index = self.share.request_index(self.ids.value)
        self.ids.value += 1
        return index

    def _next_item(self) -> Prompt | Session:
        """The next prompt (or session) of this process's share, by run-wide index; the
        index is taken by the record made for it (:meth:`_record_for`)."""
        return self.prompts.prompt(self.share.request_index(self.ids.value))

    def _record_for(self, prompt: Prompt) -> RequestRecord:
        """A new record with the next request id (on the wire) and the prompt's facts."""
        return RequestRecord(input_tokens=prompt.input_tokens,
                             input_tokens_exact=prompt.input_tokens_exact,
                             tag=prompt.tag, request_id=self._next_index() + 1,
                             session=prompt.session, turn=prompt.turn)

    def _count_issued(self, intended_ns: int) -> None:
        """A request starts: it counts towards the limit unless it is due in the ramp-up."""
        self.issued += 1
        self.ramp_issued += intended_ns < self.ramp_end_ns

    def _new_record(self, prompt: Prompt, intended_ns: int) -> RequestRecord:
        self._count_issued(intended_ns)
        rec = self._record_for(prompt)
        rec.intended_ns = intended_ns
        return rec

    def _start(self, item: Prompt | Session, intended_ns: int,
               closed: bool) -> Coroutine[Any, Any, RequestRecord]:
        """Count the request now (the next limit check must see it) and return what sends
        it, one prompt or a whole multi-turn session, and returns the last record."""
        session = item if isinstance(item, Session) else None
        prompt = session.prompt(1, ()) if session is not None else item
        return self._run(session, prompt, self._new_record(prompt, intended_ns), closed)

    async def _run(self, session: Session | None, prompt: Prompt, rec: RequestRecord,
                   closed: bool, prepared: PreparedRequest | None = None,
                   on_sent: Callable[[], None] | None = None) -> RequestRecord:
        """Send ``prompt``; in a session, then its next turns in order on this stream, each
        carrying the history so far with the model's answers. A later turn is due when
        the previous answer ended plus the think time (closed loop). A failed turn ends
        its session: the next turn would have no answer to build on. ``prepared`` (and
        ``on_sent``): the first request, built ahead by the closed loop."""
        while True:
            if closed:
                rec.start_ns = time.perf_counter_ns()
            await self._send(prompt, rec, prepared, on_sent)
            prepared = None  # later turns need the answer: built when due
            if session is None or not rec.ok or prompt.turn == len(session.turns):
                return rec
            history = (*prompt.messages, {"role": "assistant", "content": rec.text or ""})
            due = (rec.end_ns or time.perf_counter_ns()) + round(session.think_s * 1e9)
            if session.think_s:
                await asyncio.sleep(session.think_s)
            if not self._may_start():
                return rec
            prompt = session.prompt(prompt.turn + 1, history)
            rec, closed = self._new_record(prompt, due), True

    def _prepare_next(self) -> _Upcoming:
        """A stream's next request, built before it is due: prompt (a session's first
        turn), record (its id is on the wire) and, when the target can, the request itself
        (body, signature, bytes). It is counted as issued only when it starts; one left
        over at the stop is never sent."""
        item = self._next_item()
        session = item if isinstance(item, Session) else None
        prompt = session.prompt(1, ()) if session is not None else item
        rec = self._record_for(prompt)
        prepared = None
        if self._preparing:
            try:
                prepared = self.target.prepare(prompt, rec)
            except Exception:  # noqa: BLE001 - sent unprepared, where a failure becomes data
                prepared = None
        return session, prompt, rec, prepared

    # -- load models ----------------------------------------------------------------------
    async def closed_loop(self, load: ConstantConcurrency, t0: int,
                          tg: TaskGroup) -> set[asyncio.Task]:
        throttler = Throttler(1, period=1 / load.max_rate) if load.max_rate else None

        async def worker(index: int) -> None:
            # A stream's next request is due the moment its previous response ended: any
            # delay after that (task wake-up, building, writing) is the client's, and counts.
            # So the next request is built while the current one is in flight (right after
            # its bytes were written), not after it ends.
            # Ramp-up: stream ``index`` starts at t0 + index/concurrency of the ramp.
            due = t0 + self.ramp_ns * index // load.concurrency
            await asyncio.sleep(max(0, due - time.perf_counter_ns()) / 1e9)
            upcoming: _Upcoming | None = None
            loop = asyncio.get_running_loop()

            def build_next() -> None:
                nonlocal upcoming
                if upcoming is None and self._may_start():
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
                session, prompt, rec, prepared = upcoming or self._prepare_next()
                upcoming = None
                self._count_issued(due)
                rec.intended_ns = due
                last = await self._run(session, prompt, rec, True, prepared, after_write)
                due = last.end_ns or time.perf_counter_ns()

        return {tg.create_task(worker(i)) for i in range(load.concurrency)}

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
            for offset in self.share.arrivals(ramped(load.offsets_ns(), self.ramp_ns)):
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
                task = tg.create_task(self._start(self._next_item(), due, closed=False))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            stop_wait.cancel()
        return tasks


async def _fold_in_slices(level: _Level, interval_s: float = 0.05,
                          slice_requests: int = 4, pause_s: float = 0.001) -> None:
    """Move finished requests' values into the histograms off the request path: a few
    requests at a time with a pause between slices, so a burst of sends or reads never
    waits behind more than one short slice of histogram work (hdrh records in pure Python).
    The level's metrics and, with multi-turn sessions, each turn's."""
    while True:
        await asyncio.sleep(interval_s)
        for metrics in (level.metrics, *level.turn_metrics.values()):
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
    level.ramp_end_ns = t0 + level.ramp_ns if level.ramp_ns else 0
    timer = None
    if level.duration_s is not None:
        elapsed_s = (time.perf_counter_ns() - t0) / 1e9
        timer = loop.call_later(max(0.0, level.ramp_ns / 1e9 + level.duration_s - elapsed_s),
                                level.begin_stop)
    try:
        async with TaskGroup() as tg:
            helpers = [tg.create_task(w.run()) for w in watchers]
            helpers.append(tg.create_task(_fold_in_slices(level)))
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
    slos: tuple[SLO, ...] = ()  # judged on every measured request
    sinks: tuple[RecordSink, ...] = ()  # exports: see every measured request


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
                   how.share, metrics, how.slos, how.sinks)
    monitor = ClientMonitor()
    before = _connection_counters(target)
    t0 = await _run_phase(level, on_progress, (monitor, *watchers), start_ns)
    start = t0 + level.ramp_ns  # the measured window opens when the ramp-up ends
    end = max(level.last_end_ns, start)
    after = _connection_counters(target)
    send_lag = level.metrics.summary_of("send_lag_ms")
    return LevelResult(load=load, metrics=level.metrics, duration_s=(end - start) / 1e9,
                       client=monitor.report(send_lag_p99_ms=send_lag["p99"]),
                       partial=how.control.stopped, records=level.records, start_ns=start,
                       end_ns=end,
                       connections={k: v - before.get(k, 0) for k, v in after.items()},
                       slo=level.slo, turns=level.turn_metrics,
                       ramp_up_s=stop.ramp_up_s, ramp_excluded=level.ramp_issued)


async def run_level(target: Target, load: Load, stop: StopRule, prompts: Prompts, *,
                    control: RunControl | None = None, keep_records: bool = False,
                    on_progress: ProgressFn | None = None,
                    ids: RequestIds | None = None,
                    watchers: Sequence[Watcher] = (), slos: Sequence[SLO] = (),
                    sinks: Sequence[RecordSink] = ()) -> LevelResult:
    """Warm up (if asked), then measure one level. Never raises for request failures.

    ``watchers`` (e.g. a server-metrics sampler) run alongside the measured phase, next to
    the client self-check. ``slos`` are evaluated on every measured request; ``sinks``
    (exports) see every measured request as it finishes.
    """
    how = LevelRun(control or RunControl(), ids or RequestIds(), keep_records=keep_records,
                   slos=tuple(slos), sinks=tuple(sinks))
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
