"""The report's per-turn section: multi-turn runs (``--turns``), one row per level and turn.

Each turn's requests carry the whole history so far, so input tokens grow with the turn
and TTFT with them; the level's figures mix every turn. The rows come from the results'
``turns`` (same formulas as the level's metrics: :mod:`loadgen.metrics`).
"""

from __future__ import annotations

from .document import Paragraph, Section, Table, num

HEADERS = ("level", "phase", "turn", "completed / failed", "input tokens per request",
           "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "e2e p50 ms")


def _stat(turn: dict, metric: str, key: str):
    return (turn.get(metric) or {}).get(key)


def turns_section(summary: dict) -> Section:
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
    if not rows:
        return Section("Multi-turn sessions: per turn")
    note = Paragraph("Each turn's request carries the conversation so far, so its input "
                     "(and usually its TTFT) grows with the turn number.")
    return Section("Multi-turn sessions: per turn", [note, Table(HEADERS, tuple(rows))])
