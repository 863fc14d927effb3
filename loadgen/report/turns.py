"""The report's per-turn table: multi-turn runs (``--turns``), one row per level and turn.

Each turn's requests carry the whole history so far, so input tokens grow with the turn
and TTFT with them; the level's figures mix every turn. The rows come from the results'
``turns`` (same formulas as the level's metrics: :mod:`loadgen.metrics`).
"""

from __future__ import annotations

from typing import Any, Callable

TITLE = "Multi-turn sessions: per turn"
NOTE = ("Each turn's request carries the conversation so far, so its input (and usually its "
        "TTFT) grows with the turn number.")
HEADERS = ("level", "phase", "turn", "completed / failed", "input tokens per request",
           "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "e2e p50 ms")


def _stat(turn: dict, metric: str, key: str) -> Any:
    return (turn.get(metric) or {}).get(key)


def turn_table(summary: dict, num: Callable[..., str]) -> tuple[str, str, tuple, tuple]:
    """(title, note, headers, rows) of the per-turn table; no rows for single-turn runs."""
    rows = []
    for phase in summary["phases"]:
        for level in phase["levels"]:
            for turn in level.get("turns") or ():
                done = turn["completed"] + turn["failed"] + turn["incomplete"]
                rows.append((level["label"], phase["name"], str(turn["turn"]),
                             f"{turn['completed']} / {turn['failed']}",
                             num(turn["input_tokens"] / done if done else None, 0),
                             num(_stat(turn, "ttft_ms", "p50"), 1),
                             num(_stat(turn, "ttft_ms", "p99"), 1),
                             num(_stat(turn, "itl_ms", "p50")),
                             num(_stat(turn, "e2e_ms", "p50"), 1)))
    return TITLE, NOTE, HEADERS, tuple(rows)
