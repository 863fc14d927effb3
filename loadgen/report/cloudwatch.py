"""A SageMaker endpoint's CloudWatch metrics per level (``level["cloudwatch"]``, see
:mod:`loadgen.aws.cloudwatch`) as the CLI and the report show them: one line (CLI) or one
table row (report) per level."""

from __future__ import annotations

from typing import Any

from .compare import level_label
from .document import Paragraph, Section, Table, num

_HEADERS = ("phase", "level", "status", "ModelLatency mean ms", "ModelLatency p50 ms",
            "OverheadLatency mean ms", "Invocations", "4XX", "5XX", "GPU util % mean/max",
            "GPU mem % max", "CPU util % mean", "TTFT − ModelLatency ms", "ModelLatency reads as",
            "empty")


def _stat(cw: dict, metric: str, stat: str) -> Any:
    return ((((cw.get("metrics") or {}).get(metric)) or {}).get("level") or {}).get(stat)


def level_summary(cw: dict | None) -> dict | None:
    """The compact per-level view kept in a report summary (no series)."""
    if not cw:
        return None
    out = {"status": cw.get("status"), "error": cw.get("error"), "empty": cw.get("empty"),
           "client_vs_endpoint": cw.get("client_vs_endpoint")}
    out["metrics"] = {name: section.get("level") for name, section in
                      (cw.get("metrics") or {}).items()}
    return out


def cloudwatch_line(label: str, cw: dict) -> str:
    """``c=4 CloudWatch: ModelLatency p50 812 ms / mean 830 ms, overhead 9 ms, GPU 71 % ...``"""
    status = cw.get("status")
    if status in ("skipped", "error"):
        return f"{label} CloudWatch: {status}" + (f" ({cw.get('error') or cw.get('reason')})")
    parts = [(f"ModelLatency p50 {num(_stat(cw, 'ModelLatency', 'p50_ms'), 1)} ms / mean "
              f"{num(_stat(cw, 'ModelLatency', 'mean_ms'), 1)} ms"),
             f"overhead {num(_stat(cw, 'OverheadLatency', 'mean_ms'), 1)} ms",
             f"GPU {num(_stat(cw, 'GPUUtilization', 'mean'), 0)} %",
             f"invocations {num(_stat(cw, 'Invocations', 'sum'), 0)}"]
    share = cw.get("client_vs_endpoint") or {}
    if share.get("outside_model_ms") is not None:
        parts.append(f"outside the model {num(share['outside_model_ms'], 1)} ms "
                     f"({share['model_latency_reading'].replace('_', ' ')})")
    text = f"{label} CloudWatch: " + ", ".join(parts)
    if status == "incomplete":
        text += " [incomplete: not all published yet]"
    if cw.get("empty"):
        text += f"; empty: {', '.join(cw['empty'])}"
    return text


def cloudwatch_lines(levels: list[dict]) -> list[str]:
    """One line per level that has CloudWatch metrics (sagemaker:// runs)."""
    return [cloudwatch_line(level_label(lv), lv["cloudwatch"]) for lv in levels
            if lv.get("cloudwatch")]


def _row(phase: str, label: str, cw: dict) -> tuple[str, ...]:
    """One level's report row (``cw``: :func:`level_summary`'s view)."""
    share = cw.get("client_vs_endpoint") or {}

    def stat(metric: str, name: str) -> Any:
        return (cw["metrics"].get(metric) or {}).get(name)

    return (phase, label, str(cw.get("status")),
            num(stat("ModelLatency", "mean_ms"), 1),
            num(stat("ModelLatency", "p50_ms"), 1),
            num(stat("OverheadLatency", "mean_ms"), 1),
            num(stat("Invocations", "sum"), 0),
            num(stat("Invocation4XXErrors", "sum"), 0),
            num(stat("Invocation5XXErrors", "sum"), 0),
            (f"{num(stat('GPUUtilization', 'mean'), 0)}/"
             f"{num(stat('GPUUtilization', 'max'), 0)}"),
            num(stat("GPUMemoryUtilization", "max"), 0),
            num(stat("CPUUtilization", "mean"), 0),
            num(share.get("ttft_minus_model_latency_ms"), 1),
            str(share.get("model_latency_reading") or "–"),
            ", ".join(cw.get("empty") or []) or "–")


def cloudwatch_section(summary: dict) -> Section:
    """The report's table of every level's endpoint metrics (empty section: none)."""
    rows = []
    for phase in summary["phases"]:
        for level in phase["levels"]:
            cw = level.get("cloudwatch")
            if not cw:
                continue
            rows.append(_row(phase["name"], level["label"], cw))
    if not rows:
        return Section("SageMaker endpoint metrics (CloudWatch)")
    note = ("The endpoint's own metrics over each level (10-s CloudWatch periods that overlap "
            "it). ModelLatency: the container's time as SageMaker sees it; OverheadLatency: "
            "SageMaker's own. \"reads as\": whether ModelLatency ended at the first byte "
            "(≤ the client's TTFT) or spans the stream (≤ e2e); see the README.")
    return Section("SageMaker endpoint metrics (CloudWatch)",
                   [Paragraph(note), Table(_HEADERS, tuple(rows))])
