"""The parent's side of a multi-worker run: start the workers, run each level on all of
them from one shared start instant, merge what they report.

Levels run one after another, like in one process: the parent hands every worker the
same start instant a little ahead (:data:`START_LEAD_S`; Ray actors get theirs in
their own clock, corrected by the offset measured when they started), waits for every
worker's final report, and merges them (:func:`~loadgen.workers.payload.merge_level`).
While a level runs, the workers' progress reports give the live totals.

A worker that dies is reported in one line; what it had reported (its last report
with histograms) is kept, the level and the run are marked partial, and no further
level starts. :meth:`WorkerPool.close` always leaves no worker behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence

from ..engine import LevelResult, RunControl, Share
from ..errors import TargetError
from ..load import Load, StopRule
from ..metrics import LevelMetrics
from ..slo import SLO
from .handle import WorkerDied, WorkerHandle
from .payload import LevelReport, merge_level, worker_facts
from .split import worker_level

if TYPE_CHECKING:
    from ..measurement import Exports

START_LEAD_S = 0.2  # processes on this host: enough to deliver a message to each
READY_TIMEOUT_S = 120.0  # spawning N interpreters on a busy 2-core box takes a while
Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class WorkerPool:
    def __init__(self, handles: Sequence[WorkerHandle], *, lead_s: float = START_LEAD_S,
                 log: Log = _stderr, slos: tuple[SLO, ...] = ()) -> None:
        self.handles = list(handles)
        self.slos = slos  # the run's SLOs: each worker judges its requests, counts merge here
        self.lead_s = lead_s
        self.log = log
        self.dead: list[str] = []  # one line per worker that died

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start every worker and wait until all are ready (target open); else one error."""
        starts = [asyncio.ensure_future(h.start()) for h in self.handles]
        done, pending = await asyncio.wait(starts, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            late = ", ".join(str(h.index) for h, t in zip(self.handles, starts) if t in pending)
            raise TargetError(f"worker(s) {late} not ready within {timeout_s:g}s: the machine "
                              "or cluster cannot run that many; lower --workers")
        for task in starts:
            if task.exception() is not None:
                raise task.exception()

    async def close(self) -> None:
        await asyncio.gather(*(h.close() for h in self.handles), return_exceptions=True)

    def stop(self) -> None:
        """Stop every worker's current level (Ctrl-C): they still send what they measured."""
        for handle in self.alive():
            handle.stop()

    def alive(self) -> list[WorkerHandle]:
        return [h for h in self.handles if not h.died]

    @property
    def broken(self) -> bool:
        return bool(self.dead)

    def describe(self) -> dict[str, Any]:
        """The results file's top-level ``workers`` section."""
        return {"count": len(self.handles), "kind": self.handles[0].kind if self.handles else None,
                "workers": [{**h.info, "status": "died" if h.died else "ok",
                             "clock_offset_ms": round(h.clock_offset_ns / 1e6, 3)}
                            for h in self.handles],
                "dead": list(self.dead)}

    # -- levels -------------------------------------------------------------------------
    def _start_ns(self) -> int:
        return time.perf_counter_ns() + int(self.lead_s * 1e9)

    async def level(self, index: int, load: Load, stop: StopRule, control: RunControl,
                    on_progress: Callable[[dict], None] | None = None,
                    exports: Exports | None = None) -> LevelResult:
        """Level ``index`` of the run on every live worker; the merged result. The
        workers' export rows and intervals (every report carries those made since the
        last) go to ``exports``, the run's files (their level begun by the caller)."""
        # Every worker opens its connections (and sends its warm-up share) first, so the
        # measured phase starts on ready connections everywhere at once.
        # (Warm-up requests start together; opening connections needs no common start.)
        start = self._start_ns() if stop.warmup else None
        workers = self.alive()
        outcomes = await asyncio.gather(
            *(h.warm_up(index, None if start is None else start + h.clock_offset_ns, load, stop)
              for h in workers), return_exceptions=True)
        self._note_deaths(workers, outcomes)
        workers = self.alive()
        start = self._start_ns()
        ticker = asyncio.ensure_future(self._progress(start, on_progress)) \
            if on_progress else None
        exporting = _ExportWriter(exports, [h.index for h in workers if worker_level(
            load, stop, Share(h.index, len(self.handles))) is not None]) if exports else None
        for handle in workers:
            handle.on_report = exporting.take if exporting else None
        try:
            outcomes = await asyncio.gather(
                *(h.measure(index, start + h.clock_offset_ns, load, stop) for h in workers),
                return_exceptions=True)
        finally:
            if ticker is not None:
                ticker.cancel()
            for handle in workers:
                handle.on_report = None
        self._note_deaths(workers, outcomes)
        if exporting is not None:
            exporting.forget([h.index for h in workers if h.died])
        reports, facts = [], []
        for handle, outcome in zip(workers, outcomes):
            report = outcome if isinstance(outcome, LevelReport) else _lost_with(handle)
            report = _in_parent_clock(report, handle.clock_offset_ns)
            reports.append(report)
            facts.append(worker_facts(report, handle.info, "died" if handle.died else "ok"))
        level = merge_level(load, reports, start, partial=control.stopped or self.broken,
                            stop=stop, slos=self.slos)
        level.workers = facts
        return level

    def _note_deaths(self, workers: list[WorkerHandle], outcomes: list[Any]) -> None:
        for handle, outcome in zip(workers, outcomes):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, WorkerDied) and not handle.died:
                    raise outcome
                line = (handle.died or str(outcome)) + \
                    ": its counted requests are kept; the run is partial"
                if line not in self.dead:
                    self.dead.append(line)
                    self.log(f"warning: {line}")

    def statistics(self) -> dict[str, int]:
        """Live totals of the level being measured, from the workers' last progress reports."""
        keys = ("completed", "failed", "incomplete", "dropped", "output_tokens", "in_flight")
        totals = dict.fromkeys(keys, 0)
        for handle in self.handles:
            if handle.latest is not None:
                for key, value in handle.latest.statistics().items():
                    totals[key] += value
        return totals

    async def _progress(self, start_ns: int, on_progress: Callable[[dict], None]) -> None:
        while True:
            await asyncio.sleep(0.5)
            elapsed_s = max(0.0, (time.perf_counter_ns() - start_ns) / 1e9)
            on_progress({**self.statistics(), "elapsed_s": elapsed_s})


class _ExportWriter:
    """Writes what the workers' reports carry to the run's export files."""

    def __init__(self, exports: Exports, parts: list[int]) -> None:
        self.exports = exports
        if exports.hdr is not None:
            exports.hdr.expect_parts(parts)  # the workers that measure this level

    def take(self, report: LevelReport) -> None:
        if report.rows and self.exports.requests is not None:
            self.exports.requests.write_rows(report.rows)
        if self.exports.hdr is not None:
            for k, start_s, end_s, encoded in report.intervals:
                self.exports.hdr.add_part(report.worker, k, start_s, end_s, encoded)

    def forget(self, dead: list[int]) -> None:
        """Intervals no longer wait for dead workers."""
        for worker in dead:
            if self.exports.hdr is not None:
                self.exports.hdr.drop_part(worker)


def _lost_with(handle: WorkerHandle) -> LevelReport:
    """A dead worker's part of the level: what it had reported with histograms (nothing:
    an empty report), and every measured request it started that this report does not
    hold counted ``incomplete`` (reason ``worker_died``): in flight when it died, or
    finished after its last report. So completed + failed + incomplete is still every
    request the workers sent."""
    kept = handle.latest_full
    if kept is None:
        kept = LevelReport.of(handle.index, LevelMetrics(), with_histograms=True, idle=True)
    held = kept.counts["completed"] + kept.counts["failed"] + kept.counts["incomplete"]
    lost = max(0, handle.started_in_level() - held)
    if not lost:
        return kept
    return dataclasses.replace(kept, counts={**kept.counts,
                                             "incomplete": kept.counts["incomplete"] + lost},
                               worker_died=lost)


def _in_parent_clock(report: LevelReport, offset_ns: int) -> LevelReport:
    if not offset_ns:
        return report
    return dataclasses.replace(report, start_ns=report.start_ns - offset_ns,
                               end_ns=report.end_ns - offset_ns)


@contextlib.asynccontextmanager
async def started(handles: Sequence[WorkerHandle], *, timeout_s: float = READY_TIMEOUT_S,
                  **pool_options: Any) -> AsyncIterator[WorkerPool]:
    """``async with started(handles) as pool:`` every worker is ready inside, gone after."""
    pool = WorkerPool(handles, **pool_options)
    try:
        await pool.start(timeout_s)
        yield pool
    finally:
        await asyncio.shield(pool.close())
