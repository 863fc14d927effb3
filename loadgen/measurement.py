"""How a run is judged and what it writes besides the results file: SLOs, exports and the
level profile, as one frozen settings object (:class:`Measurement`).

:meth:`Measurement.open_exports` opens the exports for a run; :meth:`describe` is their
part of the results file's ``workload`` object.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

from .export import GuardedExport, HdrIntervalLog, RequestLog
from .option import option
from .slo import SLO, parse_slo

_L, _O = "Load (per level)", "Measurement and output"


@dataclass(frozen=True)
class Exports:
    """The open exports of a run (either may be None), each stopped alone by a failed write."""

    requests: GuardedExport | None = None
    hdr: GuardedExport | None = None

    @property
    def sinks(self) -> tuple:
        return tuple(x for x in (self.requests, self.hdr) if x is not None)

    def begin_level(self, index: int, load) -> None:
        for sink in self.sinks:
            sink.begin_level(index, load)

    def end_level(self) -> None:
        for sink in self.sinks:
            sink.end_level()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def describe(self) -> dict[str, str]:
        """The results' ``exports`` object: ``ok`` or ``failed: <reason>`` for each export."""
        return {name: export.status for name, export in (("requests", self.requests),
                                                         ("hdr_log", self.hdr))
                if export is not None}


@dataclass(frozen=True)
class Measurement:
    """SLOs (goodput), exports (per-request lines, interval histograms) and the profile
    that chooses the levels as the run goes. Each field is a run option."""

    slos: tuple[SLO, ...] = option((), _O, "Latency SLO, repeatable: ttft_ms<=500 (each "
                                   "request), e2e_ms:p99<=8000 (the level), "
                                   "decode_tokens_per_s>=20. Adds goodput.", metavar="SPEC",
                                   item=str, convert=parse_slo, flag="--slo")
    save_requests: str | None = option(None, _O, "Write one JSON line per request (raw "
                                       "timestamps, derived metrics, tokens, errors).",
                                       metavar="FILE.jsonl", path="file")
    hdr_log: str | None = option(None, _O, "Write interval histograms per level and metric "
                                 "(HdrHistogram log format).", metavar="DIR", path="dir")
    hdr_interval_s: float = option(5.0, _O, "Seconds per --hdr-log interval histogram.",
                                   metavar="S", low=0, low_open=True, flag="--hdr-interval")
    # "saturation": bounds, then rates between (loadgen.saturation); "slo-search": the
    # highest load meeting every SLO (loadgen.knee)
    profile: str | None = option(None, _L, "saturation: measure one stream and "
                                 "--saturation-concurrency streams, then --profile-rates "
                                 "constant rates evenly between their request rates. "
                                 "slo-search: the highest concurrency (or rate, "
                                 "--rate-search) meeting every --slo, by doubling then "
                                 "bisection, from the first --concurrency/--rate.",
                                 choices=("saturation", "slo-search"), none_means="none",
                                 sweep_only=True)
    profile_rates: int = option(5, _L, "Rate levels of --profile saturation.",
                                metavar="LEVELS", low=1, sweep_only=True)
    saturation_concurrency: int = option(64, _L, "Streams of --profile saturation's "
                                         "unthrottled level.", metavar="STREAMS", low=2,
                                         sweep_only=True)
    rate_search: bool = option(False, _L, "--profile slo-search: search open-loop rates "
                               "(from --rate, default 1/s) instead of concurrency.",
                               sweep_only=True)
    search_precision: float = option(0.10, _L, "--profile slo-search stops when (high - "
                                     "low) / low is at most this.", metavar="FRACTION",
                                     low=0, low_open=True, high=0.99, sweep_only=True)
    max_probes: int = option(10, _L, "--profile slo-search: most levels it probes.",
                             metavar="LEVELS", low=2, sweep_only=True)
    search_ceiling: int | None = option(None, _L, "--profile slo-search: never probe a "
                                        "concurrency above this.", metavar="STREAMS", low=1,
                                        none_means="no limit", sweep_only=True)

    @property
    def one_process_only(self) -> list[str]:
        """The flags of what cannot be split across worker processes yet (slo-search can:
        the parent sends every worker the level its plan chose)."""
        return ["--profile saturation"] if self.profile == "saturation" else []

    @contextlib.contextmanager
    def open_exports(self, warn: Callable[[str], None]) -> Iterator[Exports]:
        """The run's exports, closed (and flushed) however the run ends; a failed write
        stops only its export, with one line to ``warn``."""
        exports = Exports(
            GuardedExport("--save-requests", RequestLog(self.save_requests, self.slos), warn)
            if self.save_requests else None,
            GuardedExport("--hdr-log", HdrIntervalLog(self.hdr_log, self.hdr_interval_s), warn)
            if self.hdr_log else None)
        try:
            yield exports
        finally:
            exports.close()

    def describe(self) -> dict:
        """Its part of the results file's ``workload`` object."""
        return {"slos": [slo.text for slo in self.slos], "save_requests": self.save_requests,
                "hdr_log": self.hdr_log}
