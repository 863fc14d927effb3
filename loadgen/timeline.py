"""The client's per-second timeline of one level, and whether its throughput was steady.

:class:`ClientTimeline` sees every measured request (a record sink, like the exports) and
runs beside the level (a watcher). Each row is one ``interval_s`` (1 s) of the level's
clock, ``t_s`` = the row's start, seconds after the level started (``t0_ns``,
``perf_counter_ns`` = CLOCK_MONOTONIC, the clock the server sampler uses too):

====================  ==================================================================
started               requests whose ``start_ns`` falls in the row
finished / failed     requests that ended in the row (failed: error or cut off)
in_flight             started − finished, summed up to the row's end
output_tokens_per_s   tokens that arrived in the row / the row's length (the last row
                      ends with the level; a chunk's tokens are its request's
                      ``output_tokens`` spread evenly over its content chunks)
ttft_ms_p50/p99       TTFT of the requests that *finished* in the row (as ``--hdr-log``
itl_ms_p50/p99        counts a request in the interval it finished in), from interval
                      HDR histograms; null when none finished (a request seen after
                      its row was sealed counts in ``late_requests``, not in them)
====================  ==================================================================

Starts, finishes and tokens are placed by their own timestamps, so a row is exact even
though a request is only seen when it ends; the percentiles of a row are sealed once the
clock is two rows past it. Memory: a few numbers per second, two histograms per open row.

**Steady state** (:func:`steady_state`): a least-squares line through ``output_tokens_per_s``
over the middle 80 % of the rows (the first and last 10 %, at least one row each, are
ramp-up and drain). The level is steady when the line's change across that window,
``|slope| × span``, is at most :data:`STEADY_BOUND` (20 %) of the window's mean tok/s; fewer
than :data:`STEADY_MIN_ROWS` rows left (a level shorter than ~7 s) cannot be judged
(``steady: null``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hdrh.histogram import HdrHistogram

from .record import RequestRecord

STEADY_BOUND = 0.20
STEADY_MIN_ROWS = 5
COLUMNS = ("t_s", "started", "finished", "failed", "in_flight", "output_tokens_per_s",
           "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99")


def _histogram() -> HdrHistogram:
    return HdrHistogram(1, 3_600_000_000, 2)  # µs, 2 digits: a percentile within 1 %


def _percentile_ms(hist: HdrHistogram, percentile: float) -> float | None:
    if not hist.get_total_count():
        return None
    return round(hist.get_value_at_percentile(percentile) / 1000, 3)


class ClientTimeline:
    """Per-second rows of one level (see the module docstring)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_ns = round(interval_s * 1e9)
        self.t0_ns: int | None = None
        self._pending: list[RequestRecord] = []
        self._started: list[int] = []
        self._finished: list[int] = []
        self._failed: list[int] = []
        self._tokens: list[float] = []
        self._open: dict[int, tuple[HdrHistogram, HdrHistogram]] = {}
        self._sealed: dict[int, tuple[float | None, ...]] = {}
        self.late = 0  # requests placed after their row's percentiles were sealed

    # -- sink and watcher -------------------------------------------------------------------
    def add(self, record: RequestRecord) -> None:
        """On the request path: only queued; :meth:`run` places it off the path."""
        self._pending.append(record)

    async def run(self, tick_s: float = 0.05) -> None:
        """Started by the level runner beside the load (after the level began); cancelled
        at its end."""
        if self.t0_ns is None:
            self.t0_ns = time.perf_counter_ns()
        while True:
            await asyncio.sleep(tick_s)
            self.place_pending()
            self._seal_before(self._row(time.perf_counter_ns()) - 1)

    def begin(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns

    # -- placing requests -------------------------------------------------------------------
    def _row(self, ns: int) -> int:
        assert self.t0_ns is not None
        return max(0, (ns - self.t0_ns) // self.interval_ns)

    def _bump(self, column: list, row: int, amount: float = 1) -> None:
        if row >= len(column):
            column.extend([0] * (row + 1 - len(column)))
        column[row] += amount

    def place_pending(self) -> None:
        pending, self._pending = self._pending, []
        if pending and self.t0_ns is None:
            self.t0_ns = min(r.start_ns or r.intended_ns for r in pending)
        for record in pending:
            self._place(record)

    def _place(self, rec: RequestRecord) -> None:
        self._bump(self._started, self._row(rec.start_ns or rec.intended_ns))
        end_row = self._row(rec.end_ns)
        self._bump(self._finished, end_row)
        if not rec.ok:
            self._bump(self._failed, end_row)
        chunks = rec.content_ns
        if chunks and rec.output_tokens:
            per_chunk = rec.output_tokens / len(chunks)
            for ns in chunks:
                self._bump(self._tokens, self._row(ns), per_chunk)
        if end_row in self._sealed:  # seen after its row was sealed (a stalled loop)
            self.late += 1
            return
        ttft, itl = self._open.get(end_row) or self._open.setdefault(
            end_row, (_histogram(), _histogram()))
        if rec.ok and chunks:
            ttft.record_value(max(1, (chunks[0] - rec.intended_ns) // 1000))
        for a, b in zip(chunks, chunks[1:]):
            itl.record_value(max(1, min((b - a) // 1000, 3_600_000_000)))

    def _seal_before(self, row: int) -> None:
        for k in [k for k in self._open if k < row]:
            ttft, itl = self._open.pop(k)
            self._sealed[k] = (_percentile_ms(ttft, 50), _percentile_ms(ttft, 99),
                               _percentile_ms(itl, 50), _percentile_ms(itl, 99))

    # -- the result -------------------------------------------------------------------------
    def snapshot(self, end_ns: int | None = None) -> dict[str, Any]:
        """The results file's ``timeline`` object: columns of equal length, one per row."""
        self.place_pending()
        self._seal_before(1 << 62)
        rows = max(len(self._started), len(self._finished), len(self._tokens),
                   max(self._sealed, default=-1) + 1)
        if end_ns is not None and self.t0_ns is not None:
            rows = max(rows, self._row(end_ns) + 1) if end_ns > self.t0_ns else rows
        interval_s = self.interval_ns / 1e9
        columns: dict[str, list] = {name: [] for name in COLUMNS}
        in_flight = 0
        for k in range(rows):
            started, finished = _at(self._started, k), _at(self._finished, k)
            in_flight += started - finished
            ttft50, ttft99, itl50, itl99 = self._sealed.get(k, (None,) * 4)
            # The last row ends with the level: its rate is over the part it covers.
            width = interval_s
            if k == rows - 1 and end_ns is not None and self.t0_ns is not None:
                covered = (end_ns - self.t0_ns) / 1e9 - k * interval_s
                width = min(interval_s, max(covered, interval_s / 10))
            for name, value in zip(COLUMNS, (round(k * interval_s, 3), started, finished,
                                             _at(self._failed, k), in_flight,
                                             round(_at(self._tokens, k) / width, 2),
                                             ttft50, ttft99, itl50, itl99)):
                columns[name].append(value)
        return {"t0_ns": self.t0_ns, "interval_s": interval_s, "columns": columns,
                "late_requests": self.late,
                "steady": steady_state(columns["t_s"], columns["output_tokens_per_s"])}


def timeline_section(client: dict[str, Any], **sources: int | None) -> dict[str, Any]:
    """The level's ``timeline``: the client's rows plus ``sources``, one entry per server
    series (keyword = the level's key holding it, value = that series' own start in
    ``perf_counter_ns``): ``offset_s`` is what to add to the series' ``t_s`` to place it on
    the client's axis. Series that arrive later (CloudWatch) are added by :func:`add_source`."""
    client["sources"] = {}
    for name, start_ns in sources.items():
        add_source(client, name, start_ns)
    return client


def add_source(timeline: dict[str, Any] | None, name: str, start_ns: int | None) -> None:
    """Place the level's series ``name`` (starting at ``start_ns``) on ``timeline``."""
    t0 = (timeline or {}).get("t0_ns")
    if start_ns is not None and t0 is not None:
        timeline.setdefault("sources", {})[name] = {"offset_s": round((start_ns - t0) / 1e9, 6)}


def _at(column: list, k: int) -> Any:
    return column[k] if k < len(column) else 0


def steady_state(t_s: list[float], tokens_per_s: list[float],
                 bound: float = STEADY_BOUND) -> dict[str, Any]:
    """Whether throughput held steady over the middle 80 % of the rows (module docstring).

    ``{"steady": bool | None, "change": fitted change over the window / its mean,
    "bound", "rows", "reason"}``; ``steady`` is None when there are too few rows to judge.
    """
    n = len(t_s)
    cut = max(1, n // 10)  # the first and last row are always partial: ramp-up and drain
    xs, ys = t_s[cut:n - cut], tokens_per_s[cut:n - cut]
    out: dict[str, Any] = {"steady": None, "change": None, "bound": bound, "rows": len(xs),
                           "reason": None}
    if len(xs) < STEADY_MIN_ROWS:
        out["reason"] = f"{len(xs)} rows in the middle 80 %: too short to judge (need " \
                        f"{STEADY_MIN_ROWS})"
        return out
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    if mean_y <= 0:
        out.update(steady=False, reason="no output tokens in the middle 80 %")
        return out
    change = slope * (xs[-1] - xs[0]) / mean_y
    out["change"] = round(change, 4)
    out["steady"] = abs(change) <= bound
    if not out["steady"]:
        out["reason"] = (f"tok/s {'rose' if change > 0 else 'fell'} by {abs(change):.0%} of "
                         f"its mean over the middle 80 % (bound {bound:.0%})")
    return out
