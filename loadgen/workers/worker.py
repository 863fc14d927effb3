"""One worker's side of a run: the engine every worker process and Ray actor runs.

A worker receives the whole :class:`~loadgen.runconfig.RunConfig` and its
:class:`~loadgen.engine.Share` (index i of N), opens its own target (own connections,
own credentials resolved by botocore's chain for SageMaker), and then, level by
level, when the parent says so: warms up and measures its share of the level with
:func:`loadgen.engine.measure`, starting at the shared instant the parent hands out.
The hot path has no IPC: the parent reads :meth:`WorkerEngine.report` only every
:data:`PROGRESS_EVERY_S`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

from .. import engine
from ..engine import LevelRun, RequestIds, RunControl, Share
from ..export import Interval, IntervalCutter, RequestRows
from ..load import Load, StopRule
from ..metrics import LevelMetrics
from ..runconfig import RunConfig
from ..slo import SLOCounts
from ..targets.base import Target, open_target
from ..targets.factory import make_target, pool_size_for
from .payload import LevelReport
from .split import worker_level
from .starts import StartCount

PROGRESS_EVERY_S = 0.5  # counters, for live progress
HISTOGRAMS_EVERY_S = 1.0  # encoded histograms too: what is kept if the worker dies


class WorkerEngine:
    def __init__(self, config: RunConfig, share: Share, keep_records: bool = False,
                 starts: StartCount | None = None) -> None:
        self.config = config
        self.share = share
        self.starts = starts  # shared with the parent (worker processes)
        self.started = 0  # measured requests started in the level being measured
        measurement = config.measurement
        # Exports: made here, sent with every report, written by the parent.
        self.rows = RequestRows(measurement.slos) if measurement.save_requests else None
        self.cutter = (IntervalCutter(measurement.hdr_interval_s, self._keep_interval)
                       if measurement.hdr_log else None)
        self._intervals: list[tuple[int, float, float, dict[str, str]]] = []
        sinks = tuple(sink for sink in (self.rows, self.cutter) if sink is not None)
        self.how = LevelRun(RunControl(), RequestIds(), share, keep_records,
                            slos=measurement.slos,  # judged here, per request
                            sinks=sinks, on_start=self._count_start,
                            quiet_gc=config.quiet_gc)
        self._exits = contextlib.AsyncExitStack()
        self._target: Target | None = None
        self._metrics: LevelMetrics | None = None  # of the level being measured
        self._slo: SLOCounts | None = None  # its SLO counts (with --slo)
        self._start_ns = 0
        self._in_flight = 0

    def _keep_interval(self, interval: Interval) -> None:
        k, start_s, end_s, metrics = interval
        self._intervals.append((k, start_s, end_s, metrics.encoded()))

    def _exports(self) -> dict:
        """The export rows and intervals made since the last report (taken: sent once)."""
        intervals, self._intervals = self._intervals, []
        return {"rows": self.rows.take() if self.rows is not None else "",
                "intervals": intervals}

    def _count_start(self) -> None:
        self.started += 1
        if self.starts is not None:
            self.starts.add()

    async def open(self) -> dict:
        """Open the target (its preflight too); return who this worker is."""
        parts = [worker_level(load, self.config.stop, self.share) for load in self.config.loads]
        loads = [part[0] for part in parts if part is not None]
        pool = pool_size_for(loads) if loads else 1
        target = make_target(self.config.target.url, self.config.options, pool,
                             **self.config.target.sagemaker_options())
        self._target = await self._exits.enter_async_context(open_target(target))
        return {"index": self.share.index, "pid": os.getpid(), "node": socket.gethostname()}

    async def close(self) -> None:
        await self._exits.aclose()

    def stop(self) -> None:
        """Stop the run: no new request starts; in-flight ones are cancelled (incomplete)."""
        self.how.control.stop()

    async def warm_up(self, level: int, start_ns: int | None, load: Load,
                      stop: StopRule) -> None:
        """Open this worker's connections for level ``level`` (``load``, ending by
        ``stop``: the parent's plan chooses them), then send its warm-up share."""
        part = worker_level(load, stop, self.share)
        if part is not None:
            load, stop = part
            await engine.warm_up(self._target, load, stop, self.config.prompts, self.how,
                                 start_ns=start_ns)

    async def measure(self, level: int, start_ns: int, load: Load,
                      stop: StopRule) -> LevelReport:
        """This worker's share of level ``level`` (``load``, ending by ``stop``), from
        ``start_ns`` (this process's clock)."""
        whole = load
        part = worker_level(load, stop, self.share)
        if part is None:
            return LevelReport.of(self.share.index, LevelMetrics(), with_histograms=True,
                                  start_ns=start_ns, end_ns=start_ns, final=True, idle=True)
        load, stop = part
        self._metrics, self._start_ns, self._in_flight = LevelMetrics(), start_ns, 0
        self.started = 0
        self._slo = SLOCounts(self.how.slos) if self.how.slos else None
        if self.rows is not None:
            self.rows.begin_level(level + 1, whole)
        if self.cutter is not None:
            self.cutter.begin(start_ns)  # every worker's intervals: the same schedule
        try:
            result = await engine.measure(self._target, load, stop, self.config.prompts,
                                          self.how, start_ns=start_ns, metrics=self._metrics,
                                          slo=self._slo, on_progress=self._note_progress,
                                          whole=whole,
                                          watchers=(self.cutter,) if self.cutter else ())
        finally:
            self._metrics, self._slo = None, None
            if self.cutter is not None:
                self.cutter.end()
        return LevelReport.of(self.share.index, result.metrics, with_histograms=True,
                              start_ns=result.start_ns, end_ns=result.end_ns,
                              client=result.client, records=result.records,
                              connections=result.connections, final=True,
                              started=self.started, **self._exports(),
                              slo=result.slo, ramp_excluded=result.ramp_excluded,
                              turns={turn: LevelReport.of(self.share.index, metrics,
                                                          with_histograms=True)
                                     for turn, metrics in result.turns.items()})

    def _note_progress(self, snapshot: dict) -> None:
        self._in_flight = snapshot["in_flight"]

    def report(self, with_histograms: bool) -> LevelReport | None:
        """The level being measured, as it stands (None between levels)."""
        if self._metrics is None:
            return None
        return LevelReport.of(self.share.index, self._metrics, with_histograms=with_histograms,
                              start_ns=self._start_ns, end_ns=time.perf_counter_ns(),
                              in_flight=self._in_flight, started=self.started,
                              **self._exports(),
                              slo=self._slo if with_histograms else None)  # pickled at once
