"""Per-request and per-interval exports, written while the run goes (bounded memory).

- :class:`RequestLog` (``--save-requests FILE.jsonl``): one JSON line per measured
  request as it finishes: its level, every raw field of its RequestRecord (nanosecond
  ``perf_counter_ns`` timestamps, the arrival time of every content chunk, token counts,
  error type and message; not the generated text) and, with SLOs, whether it was good.
- :class:`HdrIntervalLog` (``--hdr-log DIR``): for each level and metric, a file of
  interval histograms (one per ``interval_s``) in the HdrHistogram log format, written
  with hdrh's ``HistogramLogWriter`` and readable by HdrHistogram's standard tools
  (HistogramLogProcessor, hdrh's ``HistogramLogReader``). A request is counted in the
  interval it finished in. Latencies are in µs (interval max column in ms), decode
  rates in milli-tokens/s (interval max column in tokens/s).

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
from typing import IO, Sequence

import orjson
from hdrh.log import HistogramLogWriter

from .atomic import open_for_writing
from .errors import ConfigError
from .load import Load
from .metrics import ALL_METRICS, LevelMetrics
from .record import RequestRecord
from .slo import SLO, is_good


def _open(path: Path, what: str) -> IO[str]:
    """Opened before any load: a path that cannot be written is a one-line error."""
    try:
        return open_for_writing(path, what)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write there ({exc.strerror})") from None


class RequestLog:
    """Streams one JSON line per finished request to ``path``."""

    def __init__(self, path: str | Path, slos: Sequence[SLO] = ()) -> None:
        self.path = Path(path)
        self.slos = tuple(slos)
        self._file = _open(self.path, "--save-requests")
        self._level: dict = {}
        self.written = 0

    def begin_level(self, index: int, load: Load) -> None:
        self._level = {"level": index, "load": load.label}

    def add(self, record: RequestRecord) -> None:
        line = {**self._level, **{f.name: getattr(record, f.name)
                                  for f in dataclasses.fields(record)}}
        line.pop("text", None)  # generated text stays out: the export is about timing
        if self.slos:
            line["good"] = is_good(record, self.slos)
        self._file.write(orjson.dumps(line).decode())
        self._file.write("\n")
        self.written += 1

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


class HdrIntervalLog:
    """Interval histograms of every metric, one ``.hlog`` file per level and metric.

    ``add`` folds finished requests into the current interval; ``run`` (a level watcher)
    writes an interval every ``interval_s`` on an absolute schedule; ``end_level``
    writes the last, partial interval and closes the level's files.
    """

    def __init__(self, directory: str | Path, interval_s: float = 5.0) -> None:
        if not interval_s > 0:
            raise ConfigError(f"--hdr-interval must be > 0 seconds (got {interval_s})")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--hdr-log {directory}: cannot create it ({exc.strerror})") from None
        self.interval_ns = round(interval_s * 1e9)
        self.files: list[Path] = []
        self._writers: dict[str, HistogramLogWriter] = {}
        self._current = LevelMetrics()
        self._t0 = self._interval_start = 0

    def begin_level(self, index: int, load: Load) -> None:
        self.end_level()
        self._t0 = self._interval_start = time.perf_counter_ns()
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
        self._current = LevelMetrics()

    def add(self, record: RequestRecord) -> None:
        self._current.add(record)

    def flush_interval(self, now_ns: int) -> None:
        """Write the current interval (``interval start .. now``) and start a new one."""
        if not self._writers:
            return
        start_s = (self._interval_start - self._t0) / 1e9
        end_s = (now_ns - self._t0) / 1e9
        for metric, writer in self._writers.items():
            writer.output_interval_histogram(self._current.hists[metric], start_s, end_s,
                                             max_value_unit_ratio=1000.0)
            writer.log.flush()
        self._current = LevelMetrics()
        self._interval_start = now_ns

    async def run(self) -> None:
        """Write an interval at every ``t0 + k * interval`` until cancelled; in between,
        fold the interval's values into its histograms a few requests at a time (as the
        engine does), so a flush never stalls socket reads."""
        k = 1
        while True:
            due = self._t0 + k * self.interval_ns
            while (wait_ns := due - time.perf_counter_ns()) > 0:
                await asyncio.sleep(min(wait_ns / 1e9, 0.05))
                while self._current.fold(4):
                    await asyncio.sleep(0.001)
            self.flush_interval(due)
            k += 1

    def end_level(self) -> None:
        if self._writers:
            self.flush_interval(time.perf_counter_ns())
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

    async def run(self) -> None:
        """The interval writer of an HDR log (a level watcher), stopped by a failed write."""
        if self.failure is None:
            try:
                await self.export.run()
            except OSError as exc:
                self._fail(exc)
