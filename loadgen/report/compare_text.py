"""``loadgen compare`` as text: the workload first, then fidelity, then every metric of every
level with B/A, its interval and its verdict (loadgen.stats)."""

from __future__ import annotations

from typing import Sequence

from .. import stats
from .compare import LEVEL_METRICS, mismatch_line, token_fidelity_line


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.2f}" if abs(value) < 10_000 else f"{value:,.0f}"


def _level_table(row: dict, labels: Sequence[str]) -> list[str]:
    ratio = f"{labels[1]}/{labels[0]} [95% CI]"
    # Columns as wide as their headers (at least 14): long labels must not run together.
    wa, wb = (max(14, len(text) + 2) for text in (labels[0], labels[1]))
    wr = max(24, len(ratio) + 2)
    lines = [f"  {row['label']}:",
             f"    {'metric':<22}{labels[0]:>{wa}}{labels[1]:>{wb}}{ratio:>{wr}}  verdict"]
    for key, label, _, _ in LEVEL_METRICS:
        m = row["metrics"][key]
        if m["a"] is None and m["b"] is None:
            continue
        shown = stats.times_text(m.get("ci") or m) if m.get("ratio") is not None else "–"
        lines.append(f"    {label:<22}{_number(m['a']):>{wa}}{_number(m['b']):>{wb}}"
                     f"{shown:>{wr}}  {m.get('text') or '–'}")
    return lines


def format_comparison(result: dict) -> str:
    """The comparison as text for a terminal or a pull request comment."""
    labels = result["labels"]
    lines = []
    if result["simulated"]:
        lines += ["SIMULATED: at least one of these runs used the built-in simulator, "
                  "not a real model.", ""]
    workloads = list(dict.fromkeys(result.get("workload") or []))
    if workloads:
        lines += [f"Workload: {workloads[0]}" if len(workloads) == 1 else
                  f"Workload ({labels[0]}): {workloads[0]}\nWorkload ({labels[1]}): "
                  f"{workloads[1]}", ""]
    fid = result["fidelity"]
    if fid:
        lines += [f"Fidelity ({fid['suite']}, seed {fid['seed']}):",
                  f"  {labels[0]}: {fid['score_a']}/{fid['total']} correct, "
                  f"{labels[1]}: {fid['score_b']}/{fid['total']} correct",
                  f"  identical responses (character for character): "
                  f"{fid['identical']}/{fid['total']}",
                  f"  {token_fidelity_line(fid)}"]
        if fid["mismatches"]:
            lines.append(f"  {len(fid['mismatches'])} responses differ:")
            lines += [f"    {mismatch_line(m, labels)}" for m in fid["mismatches"]]
        lines.append("")
    threshold = result.get("threshold", stats.PRACTICAL_THRESHOLD) * 100
    if result["single_stream"] or result["levels"] or result["fixed_length"]:
        lines.append(f"Throughput and latency ({labels[1]} / {labels[0]}, 95% bootstrap "
                     f"interval over requests; \"no practical difference\": the interval lies "
                     f"within ±{threshold:g} %):")
    if result["single_stream"]:
        lines += _level_table({**result["single_stream"], "label": "single stream"}, labels)
    fixed = result["fixed_length"]
    if fixed:
        lines.append(f"  fixed-length generation: mean {fixed['a_mean_s']:.2f} s → "
                     f"{fixed['b_mean_s']:.2f} s ({stats.times_text(fixed['ci'] or fixed)}; "
                     f"{fixed['text']})")
    for row in result["levels"]:
        lines += _level_table(row, labels)
    return "\n".join(lines).rstrip() + "\n"
