"""CSV exports for spreadsheets: one row per phase and level, and one per fidelity answer."""

from __future__ import annotations

import csv
import io
from typing import Any, Sequence

from .compare import fidelity_of

LEVEL_COLUMNS = (
    "simulated", "phase", "label", "checkpoint", "level", "mode", "concurrency", "rate",
    "arrival", "completed", "failed", "incomplete", "dropped", "duration_s", "output_tokens",
    "output_tokens_per_s", "requests_per_s", "decode_tokens_per_s_mean",
    "decode_tokens_per_s_p50", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "itl_ms_p50",
    "itl_ms_p90", "itl_ms_p99", "tpot_ms_p50", "e2e_ms_p50", "e2e_ms_p99",
    "cost_per_million_output_tokens", "client_saturated", "goodput_requests_per_s",
    "goodput_output_tokens_per_s")
FIDELITY_COLUMNS = ("simulated", "phase", "id", "category", "question", "expected",
                    "extracted", "correct", "error", "response")


def _safe(value: Any) -> Any:
    """Neutralise spreadsheet formulas in free text (model output can start with "=")."""
    if isinstance(value, str) and value[:1] in ("=", "+", "@", "\t", "\r") or (
            isinstance(value, str) and value[:1] == "-" and not value[1:2].isdigit()):
        return "'" + value
    return value


def _write(columns: Sequence[str], rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _safe(v) for k, v in row.items()})
    return buffer.getvalue()


def _level_row(summary: dict, phase: dict, level: dict) -> dict:
    load, requests = level["load"], level["requests"]
    row = {"simulated": summary["simulated"], "phase": phase["name"], "label": phase["label"],
           "checkpoint": phase["checkpoint"], "level": level["label"],
           "mode": load.get("mode"), "concurrency": load.get("concurrency"),
           "rate": load.get("rate"), "arrival": load.get("arrival"),
           "client_saturated": level["client"]["saturated"],
           "cost_per_million_output_tokens": level["cost_per_million_output_tokens"]}
    for key in ("completed", "failed", "incomplete", "dropped"):
        row[key] = requests.get(key)
    goodput = level.get("goodput") or {}
    row["goodput_requests_per_s"] = goodput.get("requests_per_s")
    row["goodput_output_tokens_per_s"] = goodput.get("output_tokens_per_s")
    for key in ("duration_s", "output_tokens", "output_tokens_per_s", "requests_per_s"):
        row[key] = level.get(key)
    for column in LEVEL_COLUMNS:
        metric, _, stat = column.rpartition("_")
        if column not in row and stat in ("mean", "p50", "p90", "p99"):
            row[column] = (level.get(metric) or {}).get(stat)
    return row


def levels_csv(summary: dict) -> str:
    rows = [_level_row(summary, phase, level)
            for phase in summary["phases"] for level in phase["levels"]]
    return _write(LEVEL_COLUMNS, rows)


def fidelity_csv(summary: dict, phases: Sequence[tuple[str, dict]]) -> str | None:
    """Every question of every phase that ran the suite; None when none did."""
    rows = []
    for name, result in phases:
        fidelity = fidelity_of(result)
        for answer in fidelity.answers if fidelity else ():
            q = answer.question
            rows.append({"simulated": summary["simulated"], "phase": name, "id": q.id,
                         "category": q.category, "question": q.label, "expected": q.expected,
                         "extracted": answer.extracted, "correct": answer.correct,
                         "error": answer.error, "response": answer.response})
    return _write(FIDELITY_COLUMNS, rows) if rows else None
