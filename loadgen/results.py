"""Results: the JSON file other tools rely on, and the table printed for people.

Field names are part of the public contract (README, "Results file").
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import __version__
from .atomic import write_atomic
from .engine import LevelResult
from .errors import LoadgenError
from .metrics import ALL_METRICS, LevelMetrics


HISTOGRAM_UNITS = {name: "milli_tokens_per_s" if name == "decode_tokens_per_s" else "us"
                   for name in ALL_METRICS}


def _round(value: Any, digits: int = 3) -> Any:
    return round(value, digits) if isinstance(value, float) else value


def requests_per_s(level: LevelResult) -> float:
    """Completed requests / measured window."""
    window = level.duration_s
    return level.metrics.counts.completed / window if window > 0 else 0.0


def level_to_dict(level: LevelResult) -> dict[str, Any]:
    m = level.metrics
    c = m.counts
    window = level.duration_s
    out: dict[str, Any] = {
        "load": level.load.describe(),
        "requests": {"completed": c.completed, "failed": c.failed, "incomplete": c.incomplete,
                     "dropped": c.dropped, "errors": dict(sorted(m.errors.items())),
                     "error_messages": {k: list(v) for k, v in sorted(m.error_messages.items())}},
        "duration_s": _round(window, 6),
        "output_tokens": c.output_tokens,
        "input_tokens": c.input_tokens,
        # Local counts: exact with --tokenizer, else estimates; the server's own count apart.
        "input_tokens_estimated": c.exact_input_requests < c.requests,
        "server_input_tokens": c.server_input_tokens if c.server_input_requests else None,
        "input_token_mismatches": c.input_token_mismatches,
        "cached_input_tokens": c.cached_tokens if c.cached_token_requests else None,
        "output_tokens_per_s": _round(c.output_tokens / window if window > 0 else 0.0),
        "requests_per_s": _round(requests_per_s(level), 4),
        "tokens_estimated_requests": c.estimated_token_requests,
        "histogram_clamped_values": c.clamped,
    }
    for name, stats in m.summary().items():
        out[name] = {k: _round(v) for k, v in stats.items()}
    if level.slo is not None:
        out["goodput"] = level.slo.to_dict(window, m.hists, c.requests)
    if level.ramp_up_s:
        out["ramp_up"] = {"seconds": level.ramp_up_s, "excluded_requests": level.ramp_excluded}
    if level.turns:
        out["turns"] = [_turn_to_dict(turn, level.turns[turn]) for turn in sorted(level.turns)]
    out["histograms"] = m.encoded()
    out["histogram_units"] = HISTOGRAM_UNITS
    out["client"] = level.client.to_dict()
    # Connection counters of the level: opened, reconnects (requests retried because the
    # server closed a reused connection under them), closed_by_server, connect_failures.
    out["connections"] = level.connections or None
    out["partial"] = level.partial
    # The server's own gauges sampled during the level (vLLM /metrics); null when unreachable.
    out["server_metrics"] = level.server or None
    return out


def _turn_to_dict(turn: int, metrics: LevelMetrics) -> dict[str, Any]:
    """Multi-turn sessions: the requests of one turn number (same formulas as the level)."""
    c = metrics.counts
    out: dict[str, Any] = {"turn": turn, "completed": c.completed, "failed": c.failed,
                           "incomplete": c.incomplete, "input_tokens": c.input_tokens,
                           "output_tokens": c.output_tokens}
    for name, stats in metrics.summary().items():
        out[name] = {k: _round(v) for k, v in stats.items()}
    return out


@dataclass
class RunResult:
    """What a run measured; :meth:`to_dict` is exactly the results file."""

    target: dict[str, Any]
    levels: list[LevelResult]
    started_at: str
    finished_at: str | None = None
    partial: bool = False
    simulated: bool = False
    server: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # Where :meth:`save` last wrote the file, and why that is not the asked-for path (if not).
    path: Path | None = None
    write_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"loadgen_version": __version__, "target": self.target,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "partial": self.partial, "simulated": self.simulated, "server": self.server,
                "levels": [level_to_dict(level) for level in self.levels], **self.extra}

    def write(self, path: str | os.PathLike) -> Path:
        return write_json(path, self.to_dict())

    def save(self, path: str | os.PathLike) -> Path:
        """Write the results file to ``path``; if that fails, to a fallback file instead.

        A failed write must not lose a run: the results then go to the working directory
        (else the temp directory), :attr:`write_error` says why, and later saves of this run
        keep going to the fallback file. Returns (and sets :attr:`path` to) where it wrote.
        """
        if self.write_error is None:
            try:
                self.path = self.write(path)
                return self.path
            except OSError as exc:
                self.write_error = f"cannot write {path} ({exc.strerror or exc})"
                self.path = None
        if self.path is not None:
            return self.write(self.path)
        name = f"loadgen-results-{_dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.json"
        for directory in (Path.cwd(), Path(tempfile.gettempdir())):
            try:
                self.path = self.write(directory / name)
                return self.path
            except OSError:
                continue
        raise LoadgenError(f"{self.write_error}, nor in {Path.cwd()} or "
                           f"{tempfile.gettempdir()}: results lost")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """Atomic write (temp file + rename): a crash never leaves half a results file."""
    return write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 |
                                           orjson.OPT_SERIALIZE_NUMPY))


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


TABLE_COLUMNS = ("load", "ok/fail", "out tok/s", "req/s", "TTFT p50 ms", "TTFT p99 ms",
                 "ITL p50 ms", "ITL p99 ms", "decode tok/s p50", "errors")


def error_kinds(errors: dict[str, int]) -> str:
    """``http_500×3 timeout×1``, most frequent first; ``-`` when there were none."""
    ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    return " ".join(f"{kind}×{count}" for kind, count in ranked) or "-"


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
                     _fmt(lv["ttft_ms"]["p50"]), _fmt(lv["ttft_ms"]["p99"]),
                     _fmt(lv["itl_ms"]["p50"], 2), _fmt(lv["itl_ms"]["p99"], 2),
                     _fmt(lv["decode_tokens_per_s"]["p50"]), error_kinds(req["errors"]))
                    + (_goodput_cells(lv.get("goodput")) if with_slos else ()))
    return rows


def format_table(levels: list[dict[str, Any]]) -> str:
    """Plain-text table, one row per level; the header names each column's statistic and unit."""
    header = TABLE_COLUMNS + (GOODPUT_COLUMNS if any(lv.get("goodput") for lv in levels) else ())
    rows = [header, *table_rows(levels)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w)
                       in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
