"""The report's first section: the answer.

One sentence with its intervals ("qat decodes 2.06× [2.03, 2.09] as fast as bf16-a, costs
$0.29 instead of $0.51 per 1M output tokens at concurrency 16, answers 37/40 vs 37/40
correctly, and the baseline moved +0.4 % [−0.6, +1.3]: within tolerance, the difference is
the checkpoint"), a small table (decode ×, throughput per level ×, $ per 1M output tokens,
fidelity, top-1 agreement when the fidelity comparison has it, output length, drift), and
the workload in one line. Every number comes from ``summary.json``.
"""

from __future__ import annotations

from .. import stats
from .document import Paragraph, Section, Table, is_study, money, num, what_was_measured

ANSWER_TITLE = "The answer"


def answer(summary: dict) -> Section:
    section = Section(ANSWER_TITLE)
    comparison = summary["comparison"]
    if comparison:
        section.blocks.append(Paragraph(headline_sentence(summary), headline=True))
        section.blocks.append(Table(*headline_table(summary)))
    elif is_study(summary):
        section.blocks.append(Paragraph(f"A-B-A drift: {summary['drift']['sentence']}",
                                        headline=True))
    else:
        section.blocks += [Paragraph(line) for line in _single_run_lines(summary)]
    workload = (summary.get("workload") or {}).get("line")
    if workload:
        section.blocks.append(Paragraph(f"Workload: {workload}"))
    section.blocks.append(Paragraph(what_was_measured(summary)))
    for warning in _warnings(summary):
        section.blocks.append(Paragraph(warning, warning=True))
    return section


def _warnings(summary: dict) -> list[str]:
    out = []
    non_streaming = [p["name"] for p in summary["phases"] if p["target"].get("stream") is False]
    if non_streaming:
        out.append(f"NON-STREAMING: {', '.join(non_streaming)} used whole responses (no token "
                   "stream): their TTFT equals the end-to-end latency, and ITL/TPOT/decode "
                   "rates are not measured per token.")
    if summary["run"].get("partial"):
        out.append("PARTIAL: at least one phase was interrupted; its numbers cover only what "
                   "was measured.")
    lengths = (summary.get("workload") or {}).get("output_lengths") or {}
    if lengths.get("flagged"):
        out.append(f"OUTPUT LENGTH: {', '.join(lengths['flagged'])} answered more than "
                   f"±{lengths['tolerance'] * 100:g} % longer or shorter than the baseline: "
                   "speed differences may come from answer length, not the checkpoint.")
    return out


def _cost_level(comparison: dict) -> dict | None:
    """The level the sentence quotes a cost at: the busiest one with a cost."""
    rows = [row for row in comparison["levels"]
            if row["metrics"]["cost_per_million_output_tokens"]["a"] is not None]
    return rows[-1] if rows else None


def headline_sentence(summary: dict) -> str:
    comparison = summary["comparison"]
    a, b = comparison["baseline"], comparison["candidate"]
    parts = []
    decode = comparison["single_stream_decode"]
    if decode and decode.get("ratio") is not None:
        ci = decode["ci"] or {}
        n = f"n={ci['n_a']}/{ci['n_b']} requests; " if ci.get("n_a") else ""
        parts.append(f"{b} decodes {stats.times_text(decode['ci'] or decode)} as fast as {a} "
                     f"(single stream, {n}{decode['text']})")
    else:
        row = comparison["levels"][0] if comparison["levels"] else None
        if row:
            m = row["metrics"]["output_tokens_per_s"]
            parts.append(f"{b} has {stats.times_text(m['ci'] or m)} the output tok/s of {a} "
                         f"at {row['label']} ({m['text']})")
    costly = _cost_level(comparison)
    if costly:
        cost = costly["metrics"]["cost_per_million_output_tokens"]
        parts.append(f"costs {money(cost['b'])} instead of {money(cost['a'])} per 1M output "
                     f"tokens at {costly['label']}")
    fid = comparison.get("fidelity")
    if fid:
        parts.append(f"answers {fid['score_b']}/{fid['total']} questions correctly "
                     f"({a}: {fid['score_a']}/{fid['total']}; {fid['identical']}/"
                     f"{fid['total']} answers identical)")
    drift = summary["drift"]
    text = ", ".join(parts) if parts else f"{b} vs {a}"
    if drift.get("state") != "not measured":
        text += f"; {drift['sentence']}"
    return text + "."


def _ratio_row(label: str, m: dict, shown=num) -> tuple[str, ...]:
    return (label, shown(m.get("a")), shown(m.get("b")),
            stats.times_text(m.get("ci") or m) if m.get("ratio") is not None else "–",
            m.get("text") or "–")


def headline_table(summary: dict) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    comparison = summary["comparison"]
    a, b = comparison["baseline"], comparison["candidate"]
    rows = []
    decode = comparison["single_stream_decode"]
    if decode:
        rows.append(_ratio_row("decode tok/s (single stream)", decode))
    for row in comparison["levels"]:
        rows.append(_ratio_row(f"output tok/s, {row['label']}",
                               row["metrics"]["output_tokens_per_s"]))
    for row in comparison["levels"]:
        cost = row["metrics"]["cost_per_million_output_tokens"]
        if cost["a"] is not None:
            rows.append(_ratio_row(f"$ per 1M output tokens, {row['label']}", cost, money))
    fid = comparison.get("fidelity")
    if fid:
        rows.append(("fidelity: correct", f"{fid['score_a']}/{fid['total']}",
                     f"{fid['score_b']}/{fid['total']}", "–",
                     f"{fid['identical']}/{fid['total']} identical character for character"))
        top1 = top1_agreement(fid)
        if top1 is not None:
            rows.append(("fidelity: top-1 token agreement", "–", "–", top1, "–"))
    for phase in ((summary.get("workload") or {}).get("output_lengths") or {}).get("phases", []):
        if phase["phase"] == b and (phase["load_tokens_per_request"]
                                    or phase["fidelity_chars_per_answer"]):
            rows.append(_length_row(summary, a, phase))
    drift = summary["drift"]
    if drift.get("state") != "not measured":
        rows.append((f"A-B-A drift ({drift.get('moved_metric') or '–'}, A₂/A₁ − 1)", "–", "–",
                     stats.change_text(drift.get("baseline_moved")), drift["verdict"]))
    return ("", a, b, f"{b} / {a} [95% CI]", "verdict"), tuple(rows)


def _length_row(summary: dict, a: str, phase: dict) -> tuple[str, ...]:
    lengths = summary["workload"]["output_lengths"]
    base = next(p for p in lengths["phases"] if p["phase"] == a)
    key = ("load_tokens_per_request" if phase["load_tokens_per_request"]
           else "fidelity_chars_per_answer")
    unit = "tokens/request" if key.startswith("load") else "characters/fidelity answer"
    ratio = phase[key] / base[key] if base.get(key) else None
    flag = (f"differs by more than ±{lengths['tolerance'] * 100:g} %" if phase["flag"]
            else f"within ±{lengths['tolerance'] * 100:g} %")
    return (f"output length ({unit})", num(base.get(key), 1), num(phase[key], 1),
            "–" if ratio is None else f"{ratio:.2f}×", flag)


def top1_agreement(fidelity: dict) -> str | None:
    """Top-1 token agreement of the fidelity comparison (loadgen.fidelity_tokens), when the
    servers returned logprobs: a fraction shown as a percentage, with its positions."""
    tokens = fidelity.get("tokens") or {}
    value = tokens.get("top1_agreement") if tokens.get("available") else None
    if value is None:
        value = fidelity.get("top1_agreement")  # an older summary's own field
    if value is None:
        return None
    if isinstance(value, (int, float)) and 0 <= value <= 1:
        positions = f" of {tokens['positions']} tokens" if tokens.get("positions") else ""
        return f"{value * 100:.1f}%{positions}"
    return str(value)


def _single_run_lines(summary: dict) -> list[str]:
    lines = []
    for p in summary["phases"]:
        for level in p["levels"]:
            ttft = (level.get("ttft_ms") or {}).get("p50")
            lines.append(f"{p['name']}, {level['label']}: {num(level['output_tokens_per_s'], 1)}"
                         f" output tok/s, TTFT p50 {num(ttft, 1)} ms")
    return lines
