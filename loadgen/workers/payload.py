"""What a worker reports about its part of a level, and how the parent merges the parts.

A :class:`LevelReport` is small and picklable: counters, exact sums, and each
histogram in the standard compressed HdrHistogram encoding. Workers send one every
:data:`~loadgen.workers.worker.PROGRESS_EVERY_S` (histograms every
:data:`~loadgen.workers.worker.HISTOGRAMS_EVERY_S`) and a final one when the level
ends. The parent adds the histograms (``HdrHistogram.add`` after decoding; every
process builds them with the same settings, :func:`loadgen.metrics.new_histogram`),
so a merged level is the same kind of object as a one-process level.

Throughput over the common window: every worker starts the measured phase at the
same instant t0, so the merged window is t0 (plus the ramp-up) .. the last completion
of any worker and ``output_tokens_per_s`` = Σ tokens / that window, as for one process.
Requests started during the ramp-up and SLO counts (each request judged in its
worker, :class:`~loadgen.slo.SLOCounts`) are summed; multi-turn sessions' per-turn
metrics merge turn by turn.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..engine import LevelResult
from ..load import Load, StopRule
from ..metrics import UNIT_SCALE, Counts, LevelMetrics, decode_histogram, summarize
from ..record import RequestRecord
from ..selfcheck import ClientReport
from ..slo import SLO, SLOCounts

SEND_LAG = "send_lag_ms"  # reported per worker when the metrics define it


@dataclass
class LevelReport:
    """One worker's part of one level, as it stood when sent."""

    worker: int
    counts: dict[str, int]
    errors: dict[str, int]
    totals: dict[str, int]
    histograms: dict[str, str] | None  # None in a counters-only progress report
    start_ns: int = 0  # measured window, in the worker's perf_counter_ns
    end_ns: int = 0
    in_flight: int = 0
    client: ClientReport | None = None  # final reports only
    records: list[RequestRecord] | None = None  # final reports, with keep_records
    connections: dict[str, int] | None = None  # final reports: the target's counters
    final: bool = False
    idle: bool = False  # the worker's share of the level was empty
    slo: SLOCounts | None = None  # with SLOs (reports with histograms)
    turns: dict[int, "LevelReport"] | None = None  # multi-turn sessions: each turn's part
    ramp_excluded: int = 0  # final reports: requests started during the ramp-up
    started: int = 0  # measured requests started so far (those of the ramp-up not counted)
    worker_died: int = 0  # set by the parent: started requests lost with a dead worker
    # Exports made since the last report (--save-requests lines; --hdr-log intervals as
    # (k, start_s, end_s, encoded histograms)): the parent writes them to its files.
    rows: str = ""
    intervals: list[tuple[int, float, float, dict[str, str]]] = field(default_factory=list)

    @classmethod
    def of(cls, worker: int, metrics: LevelMetrics, *, with_histograms: bool,
           **fields: Any) -> "LevelReport":
        """A report of ``metrics``. Without histograms only the live counters are read, so
        nothing is folded into histograms here (that stays off the request path)."""
        if not with_histograms:
            return cls(worker=worker, counts=metrics.statistics(), errors={}, totals={},
                       histograms=None, **fields)
        return cls(worker=worker, counts=dataclasses.asdict(metrics.counts),
                   errors=dict(metrics.errors), totals=dict(metrics.totals),
                   histograms=metrics.encoded(), **fields)

    def statistics(self) -> dict[str, int]:
        """The same keys as :meth:`LevelMetrics.statistics`, for progress display."""
        c = self.counts
        return {"completed": c["completed"], "failed": c["failed"],
                "incomplete": c["incomplete"], "dropped": c["dropped"],
                "output_tokens": c["output_tokens"], "in_flight": self.in_flight}


def merge_metrics(reports: list[LevelReport]) -> LevelMetrics:
    """One :class:`LevelMetrics` holding every report's counts and histograms."""
    merged = LevelMetrics()
    counts: Counter[str] = Counter()
    for report in reports:
        counts.update(report.counts)
        merged.errors.update(report.errors)
        for name, total in report.totals.items():
            if name in merged.totals:
                merged.totals[name] += total
        for name, encoded in (report.histograms or {}).items():
            if name in merged.hists:
                merged.hists[name].add(decode_histogram(encoded))
    for f in dataclasses.fields(Counts):
        setattr(merged.counts, f.name, counts[f.name])
    return merged


def merge_turns(reports: list[LevelReport]) -> dict[int, LevelMetrics]:
    """Multi-turn sessions: each turn number's metrics, merged over the workers."""
    numbers = sorted({turn for r in reports for turn in (r.turns or {})})
    return {turn: merge_metrics([r.turns[turn] for r in reports
                                 if r.turns and turn in r.turns]) for turn in numbers}


def merge_slo(slos: tuple[SLO, ...], reports: list[LevelReport]) -> SLOCounts | None:
    """The level's SLO counts: every worker's summed (None: the run has no SLOs)."""
    if not slos:
        return None
    merged = SLOCounts(slos)
    for report in reports:
        if report.slo is not None:
            merged.merge(report.slo)
    return merged


def merge_client(reports: list[LevelReport]) -> ClientReport:
    """The level's self-check: the busiest worker's (each worker is its own process)."""
    clients = [(r.worker, r.client) for r in reports if r.client is not None]
    if not clients:
        return ClientReport(0.0, summarize(LevelMetrics().hists["ttft_ms"], UNIT_SCALE["ttft_ms"]),
                            False, None)
    worst = max(clients, key=lambda wc: (wc[1].saturated, wc[1].cpu_percent))
    warnings = [f"worker {w}: {c.warning}" for w, c in clients if c.warning]
    notes = [f"worker {w}: {c.note}" for w, c in clients if c.note]
    return ClientReport(worst[1].cpu_percent, worst[1].loop_lag_ms,
                        any(c.saturated for _, c in clients), "; ".join(warnings) or None,
                        worst[1].cause, "; ".join(notes) or None, worst[1].machine)


def worker_facts(report: LevelReport, info: dict[str, Any], status: str) -> dict[str, Any]:
    """One entry of a level's ``workers`` list: who, what it did, its own self-check."""
    entry: dict[str, Any] = {"index": report.worker, "pid": info.get("pid"),
                             "node": info.get("node"), "status": status,
                             "completed": report.counts["completed"],
                             "failed": report.counts["failed"],
                             "output_tokens": report.counts["output_tokens"],
                             "incomplete": report.counts["incomplete"],
                             "client": report.client.to_dict() if report.client else None}
    if report.histograms and SEND_LAG in report.histograms:
        lag = summarize(decode_histogram(report.histograms[SEND_LAG]), UNIT_SCALE[SEND_LAG],
                        report.totals.get(SEND_LAG))
        entry[SEND_LAG] = {k: round(v, 3) if isinstance(v, float) else v for k, v in lag.items()}
    if report.worker_died:
        entry["worker_died"] = report.worker_died  # of its incomplete: lost when it died
    return entry


def merge_level(load: Load, reports: list[LevelReport], start_ns: int,
                partial: bool, stop: StopRule, slos: tuple[SLO, ...] = ()) -> LevelResult:
    """The level as one process would have reported it (``start_ns``: the shared t0,
    in the parent's clock; reports' ends are already in the parent's clock). The
    measured window opens when ``stop``'s ramp-up ends, as in one process."""
    start_ns += round(stop.ramp_up_s * 1e9)
    ends = [r.end_ns for r in reports if not r.idle]
    end = max([start_ns, *ends])
    records = None
    if any(r.records is not None for r in reports):
        records = [rec for r in reports for rec in (r.records or [])]
    connections: Counter[str] = Counter()
    for report in reports:
        connections.update(report.connections or {})
    return LevelResult(load=load, metrics=merge_metrics(reports),
                       duration_s=(end - start_ns) / 1e9, client=merge_client(reports),
                       partial=partial, records=records, start_ns=start_ns, end_ns=end,
                       connections=dict(connections), slo=merge_slo(slos, reports),
                       turns=merge_turns(reports),
                       ramp_up_s=stop.ramp_up_s,
                       ramp_excluded=sum(r.ramp_excluded for r in reports),
                       incomplete_reasons=_incomplete_reasons(reports))


def _incomplete_reasons(reports: list[LevelReport]) -> dict[str, int]:
    lost = sum(r.worker_died for r in reports)
    return {"worker_died": lost} if lost else {}


__all__ = ["LevelReport", "merge_level", "merge_metrics", "worker_facts"]
