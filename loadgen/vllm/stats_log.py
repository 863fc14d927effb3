"""vLLM's periodic stats log line (every ~10 s while it serves) as a server series: the
source when ``/metrics`` is out of reach (a SageMaker endpoint without detailed
observability writes it to CloudWatch Logs).

The line across versions (V0 engine, then V1; ``Engine 000:`` since ~0.9)::

    Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 25.3 tokens/s,
      Running: 2 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.2%,
      CPU KV cache usage: 0.0%.
    Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 25.3 tokens/s,
      Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%, Prefix cache hit rate: 0.0%

Each field is matched on its own, so a version that drops or adds one still parses. The
names are the ``/metrics`` sampler's (:mod:`loadgen.vllm.server_metrics`), so both sources
fill the same series; KV usage and the hit rate are fractions (0-1) as ``/metrics`` has
them. The throughputs are vLLM's own averages over the interval since its previous line.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .facts import strip_ansi

COLUMNS = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
           "prompt_tokens_per_s", "generation_tokens_per_s", "prefix_cache_hit_rate")
_FIELDS = (
    ("prompt_tokens_per_s", re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s"), 1.0),
    ("generation_tokens_per_s", re.compile(r"Avg generation throughput: ([\d.]+) tokens/s"), 1.0),
    ("num_requests_running", re.compile(r"Running: (\d+) reqs"), 1.0),
    ("num_requests_waiting", re.compile(r"(?:Waiting|Pending): (\d+) reqs"), 1.0),
    ("kv_cache_usage_perc", re.compile(r"(?<!CPU )KV cache usage: ([\d.]+)%"), 0.01),
    ("prefix_cache_hit_rate", re.compile(r"Prefix cache hit rate: ([\d.]+)%"), 0.01),
)
_ENGINE = re.compile(r"Engine (\d+): Avg prompt throughput")


def parse_stats_line(line: str) -> dict[str, Any] | None:
    """The fields of one stats line (None: not a stats line)."""
    line = strip_ansi(line)
    if "Avg prompt throughput" not in line:
        return None
    row: dict[str, Any] = {}
    for name, pattern, scale in _FIELDS:
        match = pattern.search(line)
        if match:
            row[name] = round(float(match.group(1)) * scale, 6)
    engine = _ENGINE.search(line)
    row["engine"] = int(engine.group(1)) if engine else 0
    return row


def stats_series(events: Iterable[tuple[float | None, str]]) -> dict[str, Any]:
    """A server series from ``(time in epoch seconds or None, line)`` pairs, oldest first:
    ``t_unix_s`` and one list per column (None where a line lacks the field)."""
    rows = [(t, row) for t, line in events if (row := parse_stats_line(line)) is not None]
    return {"source": "vllm-stats-log", "rows": len(rows),
            "t_unix_s": [t for t, _ in rows], "engine": [row["engine"] for _, row in rows],
            **{name: [row.get(name) for _, row in rows] for name in COLUMNS}}


def format_series(series: dict[str, Any]) -> str:
    """A plain-text table of the series (the last row's time is the newest)."""
    from datetime import datetime, timezone

    header = ("time (UTC)", "running", "waiting", "KV %", "gen tok/s", "prompt tok/s")
    lines = ["  ".join(f"{h:>12}" for h in header)]
    for i, t in enumerate(series["t_unix_s"]):
        when = datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S") if t else "-"
        kv = series["kv_cache_usage_perc"][i]
        cells = (when, series["num_requests_running"][i], series["num_requests_waiting"][i],
                 None if kv is None else round(kv * 100, 1), series["generation_tokens_per_s"][i],
                 series["prompt_tokens_per_s"][i])
        lines.append("  ".join(f"{'-' if c is None else c!s:>12}" for c in cells))
    return "\n".join(lines)
