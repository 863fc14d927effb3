"""Per-request and per-interval exports, written while the run goes (bounded memory).

- :class:`RequestLog` (``--save-requests FILE.jsonl``): one JSON line per measured
  request as it finishes: its level, every raw field of its RequestRecord (nanosecond
  ``perf_counter_ns`` timestamps, the arrival time of every content chunk, token counts,
  ``max_tokens``, error type and message; not the generated text) and, with SLOs, whether
  it was good. Rows are made by :class:`RequestRows`, where the requests ran.
- :class:`HdrIntervalLog` (``--hdr-log DIR``): for each level and metric, a file of
  interval histograms (one per ``interval_s``) in the HdrHistogram log format, written
  with hdrh's ``HistogramLogWriter`` and readable by HdrHistogram's standard tools
  (HistogramLogProcessor, hdrh's ``HistogramLogReader``). Interval k spans
  t0 + k·interval .. t0 + (k+1)·interval from the level's measured start t0 (the last
  one ends with the level); a request is counted in the interval it finished in
  (:class:`IntervalCutter`). Latencies are in µs (interval max column in ms), decode
  rates in milli-tokens/s (interval max column in tokens/s).

With ``--workers``/``--ray`` every worker makes its own rows and cuts its own intervals
on the same schedule (every worker starts a level at the same instant t0); its reports
carry them to the parent, which writes the rows to the one file and adds the workers'
interval k histograms into one interval k (:meth:`HdrIntervalLog.add_part`): the same
files as one process would write.

Files are opened by :func:`loadgen.atomic.open_for_writing` (devices and FIFOs written
through, symlinks followed, never replaced). A file that fails mid-run (a full disk, a
size limit) stops only its own export: :class:`GuardedExport` says so in one warning line
and in the results' ``exports`` object, and the run goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from pathlib import Path
from typing import IO, Callable, Sequence

import orjson
from hdrh.log import HistogramLogWriter

from .atomic import open_for_writing
from .errors import ConfigError
from .load import Load
from .metrics import ALL_METRICS, LevelMetrics, decode_histogram, new_histogram, request_metrics
from .record import RequestRecord
from .slo import SLO, is_good


def _open(path: Path, what: str) -> IO[str]:
    """Opened before any load: a path that cannot be written is a one-line error."""
    try:
        return open_for_writing(path, what)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write there ({exc.strerror})") from None


class RequestRows:
    """The ``--save-requests`` lines of one process's measured requests, kept until taken
    (:meth:`take`): what a worker sends its parent with each report."""

    def __init__(self, slos: Sequence[SLO] = ()) -> None:
        self.slos = tuple(slos)
        self._level: dict = {}
        self._lines: list[str] = []

    def begin_level(self, index: int, load: Load) -> None:
        """Rows carry the level's number and the whole level's label (not a worker's share)."""
        self._level = {"level": index, "load": load.label}

    def line(self, record: RequestRecord) -> str:
        row = {**self._level, **{f.name: getattr(record, f.name)
                                 for f in dataclasses.fields(record)}}
        row.pop("text", None)  # generated text stays out: the export is about timing
        row.update(request_metrics(record))  # derived, next to the raw timestamps
        if self.slos:
            row["good"] = is_good(record, self.slos)
        return orjson.dumps(row).decode() + "\n"

    def add(self, record: RequestRecord) -> None:
        self._lines.append(self.line(record))

    def take(self) -> str:
        """The lines made since the last call, as one text."""
        text, self._lines = "".join(self._lines), []
        return text

    def end_level(self) -> None:
        pass


class RequestLog:
    """Streams one JSON line per finished request to ``path`` (this process's requests,
    or lines made by workers: :meth:`write_rows`): its raw record (timestamps in ns, tokens,
    error) and its derived metrics (:func:`loadgen.metrics.request_metrics`: ttft_ms,
    e2e_ms, tpot_ms, decode_tokens_per_s, itl_mean_ms, itl_max_ms, error)."""

    def __init__(self, path: str | Path, slos: Sequence[SLO] = ()) -> None:
        self.path = Path(path)
        self.rows = RequestRows(slos)
        self._file = _open(self.path, "--save-requests")
        self.written = 0

    def begin_level(self, index: int, load: Load) -> None:
        self.rows.begin_level(index, load)

    def add(self, record: RequestRecord) -> None:
        self.write_rows(self.rows.line(record))

    def write_rows(self, text: str) -> None:
        """Whole lines made by :class:`RequestRows` (a worker's)."""
        self._file.write(text)
        self.written += text.count("\n")

    def end_level(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def abandon(self) -> None:
        """Close after a failed write, without trying the write again."""
        try:
            self._file.close()
        except OSError:
            pass  # the buffered lines that failed are dropped; the fd is closed regardless

    def statistics(self) -> dict:
        return {"path": str(self.path), "written": self.written}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


# An interval's histograms as it is cut: its number k, start and end (seconds from the
# level's t0), and its metrics.
Interval = tuple[int, float, float, LevelMetrics]


class IntervalCutter:
    """Cuts a level's finished requests into interval histograms on an absolute schedule:
    interval k is due at t0 + (k+1)·interval; ``end`` cuts the last, partial one. Each
    cut interval goes to ``emit``."""

    def __init__(self, interval_s: float, emit: Callable[[Interval], None]) -> None:
        if not interval_s > 0:
            raise ConfigError(f"--hdr-interval must be > 0 seconds (got {interval_s})")
        self.interval_ns = round(interval_s * 1e9)
        self.emit = emit
        self.t0: int | None = None  # None: between levels
        self._k = 0
        self._current = LevelMetrics()

    def begin(self, t0_ns: int) -> None:
        """The level's measured phase starts at ``t0_ns`` (this process's perf_counter_ns)."""
        self.t0, self._k, self._current = t0_ns, 0, LevelMetrics()

    def add(self, record: RequestRecord) -> None:
        self._current.add(record)

    def cut(self, now_ns: int) -> None:
        """Emit the current interval (its start .. ``now_ns``) and start the next."""
        assert self.t0 is not None
        start_s = self._k * self.interval_ns / 1e9
        self.emit((self._k, start_s, max(start_s, (now_ns - self.t0) / 1e9), self._current))
        self._k += 1
        self._current = LevelMetrics()

    async def run(self) -> None:
        """Cut an interval at every ``t0 + k * interval`` until cancelled (t0: now, unless
        :meth:`begin` set it); in between, fold the interval's values into its histograms
        a few requests at a time (as the engine does), so a cut never stalls socket reads."""
        if self.t0 is None:
            self.begin(time.perf_counter_ns())
        while True:
            due = self.t0 + (self._k + 1) * self.interval_ns
            while (wait_ns := due - time.perf_counter_ns()) > 0:
                await asyncio.sleep(min(wait_ns / 1e9, 0.05))
                while self._current.fold(4):
                    await asyncio.sleep(0.001)
            self.cut(due)

    def end(self) -> None:
        """The level ended: cut its last, partial interval (nothing if it never began)."""
        if self.t0 is not None:
            self.cut(time.perf_counter_ns())
            self.t0 = None

    def end_level(self) -> None:  # a sink's end (workers)
        self.end()


class HdrIntervalLog:
    """Interval histograms of every metric, one ``.hlog`` file per level and metric.

    One process: ``add`` folds finished requests into the current interval (an
    :class:`IntervalCutter`), ``run`` (a level watcher) cuts an interval every
    ``interval_s``, ``end_level`` cuts the last, partial interval and closes the level's
    files. With workers: ``begin_level``, :meth:`expect_parts`, then :meth:`add_part` for
    each worker's interval; interval k is written once every part has sent it (or died).
    """

    def __init__(self, directory: str | Path, interval_s: float = 5.0) -> None:
        self.cutter = IntervalCutter(interval_s, self._write)
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--hdr-log {directory}: cannot create it ({exc.strerror})") from None
        self.files: list[Path] = []
        self._writers: dict[str, HistogramLogWriter] = {}
        self._parts: dict[int, int] = {}  # worker -> intervals it sent (workers' levels)
        self._pending: dict[int, list[tuple[float, float, dict[str, str]]]] = {}

    def begin_level(self, index: int, load: Load) -> None:
        self.end_level()
        epoch_s = time.time()
        for metric in ALL_METRICS:
            path = self.directory / f"{index:02d}-{_slug(load.label)}.{metric}.hlog"
            writer = HistogramLogWriter(open_for_writing(path, "--hdr-log"))
            writer.output_comment(f"[loadgen level {index}: {load.label}; metric {metric}]")
            writer.output_log_format_version()
            # hdrh's output_start_time() fails on Python 3 (datetime.iso_format): same line by hand.
            writer.output_comment(f"[StartTime: {epoch_s:.3f} (seconds since epoch), "
                                  f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(epoch_s))}]")
            writer.output_legend()
            self._writers[metric] = writer
            self.files.append(path)
        self._parts, self._pending = {}, {}

    def add(self, record: RequestRecord) -> None:
        self.cutter.add(record)

    async def run(self) -> None:
        await self.cutter.run()

    def _write(self, interval: Interval) -> None:
        _, start_s, end_s, metrics = interval
        self._write_histograms(start_s, end_s, metrics.hists)

    def _write_histograms(self, start_s: float, end_s: float, hists: dict) -> None:
        if not self._writers:
            return
        for metric, writer in self._writers.items():
            writer.output_interval_histogram(hists[metric], start_s, end_s,
                                             max_value_unit_ratio=1000.0)
            writer.log.flush()

    # -- workers ----------------------------------------------------------------------------
    def expect_parts(self, workers: Sequence[int]) -> None:
        """This level's intervals come from these workers (those measuring it)."""
        self._parts = dict.fromkeys(workers, 0)

    def add_part(self, worker: int, k: int, start_s: float, end_s: float,
                 encoded: dict[str, str]) -> None:
        """Worker ``worker``'s interval ``k`` (its histograms encoded); every worker sends
        its intervals in order."""
        self._pending.setdefault(k, []).append((start_s, end_s, encoded))
        if worker in self._parts:
            self._parts[worker] = k + 1
        self._write_ready()

    def drop_part(self, worker: int) -> None:
        """Worker ``worker`` died: write what no longer waits for it."""
        self._parts.pop(worker, None)
        self._write_ready()

    def _write_ready(self, through: int | None = None) -> None:
        """Write every pending interval below ``through`` (default: all that every live
        part has sent), in order, each the sum of the parts' histograms."""
        if through is None:
            through = min(self._parts.values(), default=max(self._pending, default=-1) + 1)
        for k in sorted(k for k in self._pending if k < through):
            parts = self._pending.pop(k)
            hists = {metric: new_histogram(metric) for metric in ALL_METRICS}
            for _, _, encoded in parts:
                for metric, text in encoded.items():
                    hists[metric].add(decode_histogram(text))
            self._write_histograms(min(p[0] for p in parts), max(p[1] for p in parts), hists)

    def end_level(self) -> None:
        if self._writers:
            self.cutter.end()
            self._write_ready(through=max(self._pending, default=-1) + 1)
            for writer in self._writers.values():
                writer.close()
            self._writers = {}

    close = end_level

    def abandon(self) -> None:
        """Close the level's files after a failed write, without writing again."""
        for writer in self._writers.values():
            try:
                writer.log.close()
            except OSError:
                pass
        self._writers = {}

    def statistics(self) -> dict:
        return {"directory": str(self.directory), "files": len(self.files)}


class GuardedExport:
    """An export whose file may fail mid-run (a full disk, ``RLIMIT_FSIZE``): the first
    ``OSError`` stops that export alone. ``warn`` gets one ``warning:`` line, :attr:`status`
    says ``failed: <reason>`` (else ``ok``), and every later call does nothing."""

    def __init__(self, option: str, export: RequestLog | HdrIntervalLog, warn) -> None:
        self.option = option
        self.export = export
        self.warn = warn
        self.failure: str | None = None

    @property
    def status(self) -> str:
        return self.failure or "ok"

    def _fail(self, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        self.failure = f"failed: {reason}"
        where = getattr(self.export, "path", None) or self.export.directory
        self.warn(f"warning: {self.option} {where}: {reason}; that export stopped, "
                  "the run goes on")
        self.export.abandon()

    def _call(self, method: str, *args) -> None:
        if self.failure is None:
            try:
                getattr(self.export, method)(*args)
            except OSError as exc:
                self._fail(exc)

    def begin_level(self, index: int, load: Load) -> None:
        self._call("begin_level", index, load)

    def add(self, record: RequestRecord) -> None:
        self._call("add", record)

    def end_level(self) -> None:
        self._call("end_level")

    def close(self) -> None:
        self._call("close")

    # What the parent of --workers writes for its workers (RequestLog / HdrIntervalLog).
    def write_rows(self, text: str) -> None:
        self._call("write_rows", text)

    def expect_parts(self, workers: Sequence[int]) -> None:
        self._call("expect_parts", workers)

    def add_part(self, worker: int, k: int, start_s: float, end_s: float,
                 encoded: dict[str, str]) -> None:
        self._call("add_part", worker, k, start_s, end_s, encoded)

    def drop_part(self, worker: int) -> None:
        self._call("drop_part", worker)

    async def run(self) -> None:
        """The interval writer of an HDR log (a level watcher), stopped by a failed write."""
        if self.failure is None:
            try:
                await self.export.run()
            except OSError as exc:
                self._fail(exc)
