"""The table ``loadgen run``/``sweep`` print and MCP's ``get_results`` returns: one row per
level of a results file's ``levels``, the header naming each column's statistic and unit.
(Here, not in ``cli/``, so that both front doors read it: only the CLI imports ``cli``.)"""

from __future__ import annotations

from typing import Any

from ..metrics import FEW_SAMPLES_MARK, FEW_SAMPLES_NOTE, few_samples
from ..progress import error_kinds


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


TABLE_COLUMNS = ("load", "ok/fail", "out tok/s", "req/s", "TTFT p50 ms", "TTFT p99 ms",
                 "ITL p50 ms", "ITL p99 ms", "decode tok/s p50", "errors")


def load_label(load: dict[str, Any]) -> str:
    if load["mode"] == "trace":
        return f"trace x{load['speedup']:g}"
    return (f"c={load['concurrency']}" if load["mode"] == "concurrency"
            else f"{load['arrival']} {load['rate']:g}/s")


# With SLOs: goodput (req/s of requests meeting every per-request SLO) and whether the
# level met its percentile SLOs.
GOODPUT_COLUMNS = ("good req/s", "good %", "pctl SLOs")


def _goodput_cells(goodput: dict | None) -> tuple[str, ...]:
    if goodput is None:
        return ("-", "-", "-")
    fraction = goodput["good_fraction"]
    met = goodput["percentile_slos_met"]
    return (_fmt(goodput["requests_per_s"], 2), _fmt(None if fraction is None else 100 * fraction),
            "-" if met is None else ("met" if met else "MISSED"))


def _p99(stats: dict, digits: int = 1) -> str:
    """A p99 cell, marked when it comes from too few samples (see metrics.few_samples)."""
    text = _fmt(stats["p99"], digits)
    return text + FEW_SAMPLES_MARK if few_samples(stats, "p99") else text


def table_rows(levels: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    with_slos = any(lv.get("goodput") for lv in levels)
    rows = []
    for lv in levels:
        req = lv["requests"]
        ok = f"{req['completed']}/{req['failed']}"
        if req["incomplete"] or req["dropped"]:
            ok += f" (+{req['incomplete']} inc, {req['dropped']} drop)"
        rows.append((load_label(lv["load"]), ok, _fmt(lv["output_tokens_per_s"]),
                     _fmt(lv["requests_per_s"], 2),
                     _fmt(lv["ttft_ms"]["p50"]), _p99(lv["ttft_ms"]),
                     _fmt(lv["itl_ms"]["p50"], 2), _p99(lv["itl_ms"], 2),
                     _fmt(lv["decode_tokens_per_s"]["p50"]), error_kinds(req["errors"]))
                    + (_goodput_cells(lv.get("goodput")) if with_slos else ()))
    return rows


# The server's own peaks over each level (vLLM /metrics), when it exposes them.
SERVER_COLUMNS = {"KV peak %": ("kv_cache_usage_perc", 100.0),
                  "waiting peak": ("num_requests_waiting", 1.0)}


def _server_cells(levels: list[dict[str, Any]]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """``KV peak %``, ``waiting peak`` and ``preempt`` (preemptions during the level),
    each only when some level's server exposed it."""
    def peak(lv: dict, series: str) -> float | None:
        summary = (lv.get("server_metrics") or {}).get("summary") or {}
        return (summary.get(series) or {}).get("max")

    header: list[str] = [name for name, (series, _) in SERVER_COLUMNS.items()
                         if any(peak(lv, series) is not None for lv in levels)]
    with_preempt = any((lv.get("server_metrics") or {}).get("preemptions") is not None
                       for lv in levels)
    rows = []
    for lv in levels:
        cells = []
        for name in header:
            series, scale = SERVER_COLUMNS[name]
            value = peak(lv, series)
            cells.append(_fmt(None if value is None else value * scale, 1 if scale > 1 else 0))
        if with_preempt:
            cells.append(_fmt((lv.get("server_metrics") or {}).get("preemptions"), 0))
        rows.append(tuple(cells))
    return tuple(header) + (("preempt",) if with_preempt else ()), rows


TURN_COLUMNS = ("load", "turn", "ok/fail", "in tok/req", "TTFT p50 ms", "TTFT p99 ms",
                "ITL p50 ms", "e2e p50 ms")


def turn_rows(levels: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Multi-turn runs (--turns): one row per level and turn number (the results' ``turns``)."""
    rows = []
    for lv in levels:
        for turn in lv.get("turns") or ():
            done = turn["completed"] + turn["failed"] + turn["incomplete"]
            rows.append((load_label(lv["load"]), str(turn["turn"]),
                         f"{turn['completed']}/{turn['failed']}",
                         _fmt(turn["input_tokens"] / done if done else None, 0),
                         _fmt(turn["ttft_ms"]["p50"]), _p99(turn["ttft_ms"]),
                         _fmt(turn["itl_ms"]["p50"], 2), _fmt(turn["e2e_ms"]["p50"])))
    return rows


def _aligned(header: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
    rows = [header, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w)
                       in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_table(levels: list[dict[str, Any]], workload: str | None = None) -> str:
    """Plain-text table, one row per level; the header names each column's statistic and unit,
    and the line above it the workload (loadgen.report.workload.describe_workload).
    A multi-turn run adds a table per turn number (input grows with the history)."""
    header = TABLE_COLUMNS + (GOODPUT_COLUMNS if any(lv.get("goodput") for lv in levels) else ())
    server_header, server_rows = _server_cells(levels)
    header += server_header
    body = [row + extra for row, extra in zip(table_rows(levels), server_rows)]
    turns = turn_rows(levels)
    lines = _aligned(header, body)
    if workload:
        lines.insert(0, f"Workload: {workload}")
    if turns:
        lines += ["", "per turn:", *_aligned(TURN_COLUMNS, turns)]
    if any(cell.endswith(FEW_SAMPLES_MARK) for row in body + turns for cell in row):
        lines.append(FEW_SAMPLES_NOTE)
    return "\n".join(lines)
