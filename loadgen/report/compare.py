"""Comparing two runs: B/A ratios, fidelity mismatches, the A-B-A drift check, and a
bootstrap confidence interval on a B/A ratio.

Everything here works on plain dicts (results files as loaded from JSON) and
returns plain dicts, so the summary, the reports and ``loadgen compare`` share it.
Conventions: A is the baseline (e.g. bf16), B the candidate (e.g. QAT), and a
ratio is always B / A. For throughputs a ratio above 1 means B is faster; for
latencies a ratio below 1 means B is faster.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import ConfigError
from ..fidelity import FidelityResult
from ..fidelity_tokens import compare_logprobs

DEFAULT_DRIFT_TOLERANCE = 0.05
MIN_BOOTSTRAP_N = 5  # fewer observations on a side: no confidence interval
WITHIN_NOISE = "within noise"
BEYOND_NOISE = "beyond noise"
VERDICT_OK = "within tolerance"
VERDICT_DRIFT = "drift: the difference may not be the checkpoint"

# (key, label, path into a level dict, higher is better)
LEVEL_METRICS: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("output_tokens_per_s", "output tok/s", ("output_tokens_per_s",), True),
    ("requests_per_s", "requests/s", ("requests_per_s",), True),
    ("decode_tokens_per_s", "decode tok/s (mean)", ("decode_tokens_per_s", "mean"), True),
    ("ttft_ms_p50", "TTFT p50 ms", ("ttft_ms", "p50"), False),
    ("ttft_ms_p99", "TTFT p99 ms", ("ttft_ms", "p99"), False),
    ("itl_ms_p50", "ITL p50 ms", ("itl_ms", "p50"), False),
    ("itl_ms_p99", "ITL p99 ms", ("itl_ms", "p99"), False),
    ("e2e_ms_p50", "E2E p50 ms", ("e2e_ms", "p50"), False),
    # Runs made with --slo (absent otherwise, and then not shown).
    ("goodput_requests_per_s", "goodput req/s", ("goodput", "requests_per_s"), True),
    ("goodput_output_tokens_per_s", "goodput tok/s", ("goodput", "output_tokens_per_s"), True),
)


def ratio(a: float | None, b: float | None) -> float | None:
    """B / A, or None when either is missing or A is zero."""
    if a is None or b is None or a == 0:
        return None
    return b / a


def relative_difference(a1: float | None, a2: float | None) -> float | None:
    """|A₂ − A₁| / A₁: how far the repeated baseline moved from the first one."""
    if a1 is None or a2 is None or a1 == 0:
        return None
    return abs(a2 - a1) / abs(a1)


def dig(data: Any, path: Iterable[str]) -> Any:
    """``dig(level, ("ttft_ms", "p50"))``; None when any step is missing."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


# --------------------------------------------------------------------------- levels


def level_key(level: dict) -> tuple:
    load = level.get("load") or {}
    if load.get("mode") == "trace":
        return ("trace", load.get("speedup"), load.get("trace_requests"))
    if load.get("mode") == "rate":
        return ("rate", load.get("rate"), load.get("arrival"))
    return ("concurrency", load.get("concurrency"))


def level_label(level: dict) -> str:
    load = level.get("load") or {}
    if load.get("mode") == "trace":
        return f"trace replay x{load.get('speedup'):g}"
    if load.get("mode") == "rate":
        arrival = load.get("arrival")
        suffix = f" ({arrival})" if arrival and arrival != "constant" else ""
        return f"rate {load.get('rate'):g}/s{suffix}"
    return f"concurrency {load.get('concurrency')}"


def level_metrics(level: dict) -> dict[str, float | None]:
    """The flat numbers of one level that comparisons use, keyed as in LEVEL_METRICS."""
    return {key: dig(level, path) for key, _, path, _ in LEVEL_METRICS}


def compare_levels(levels_a: Sequence[dict], levels_b: Sequence[dict]) -> list[dict]:
    """Levels present in both runs (matched by load), each metric with A, B and B/A."""
    by_key_b = {level_key(level): level for level in levels_b}
    rows = []
    for level_a in levels_a:
        level_b = by_key_b.get(level_key(level_a))
        if level_b is None:
            continue
        values_a, values_b = level_metrics(level_a), level_metrics(level_b)
        metrics = {key: {"a": values_a[key], "b": values_b[key],
                         "ratio": ratio(values_a[key], values_b[key])}
                   for key in values_a}
        decode = metrics["decode_tokens_per_s"]
        decode["ci"] = decode_rate_ci(level_a, level_b)
        decode["noise"] = noise_verdict(decode["ratio"], ci=decode["ci"])
        rows.append({"load": level_a.get("load"), "label": level_label(level_a),
                     "metrics": metrics})
    return rows


# --------------------------------------------------------------------------- fidelity


def compare_fidelity(a: FidelityResult, b: FidelityResult,
                     labels: tuple[str, str] = ("A", "B")) -> dict:
    """Scores, how many raw responses are identical character for character, and every
    question where the two responses differ, with both answers and which is right."""
    prompts_a = [x.question.prompt for x in a.answers]
    prompts_b = [x.question.prompt for x in b.answers]
    if prompts_a != prompts_b:
        raise ConfigError(f"the two runs asked different fidelity questions (seed {a.seed} vs "
                          f"{b.seed}); run both with the same fidelity seed")
    identical, mismatches = 0, []
    for answer_a, answer_b in zip(a.answers, b.answers):
        if answer_a.response is not None and answer_a.response == answer_b.response:
            identical += 1
            continue
        question = answer_a.question
        mismatches.append({
            "id": question.id, "category": question.category, "label": question.label,
            "expected": question.expected,
            "a": _side(answer_a), "b": _side(answer_b)})
    tokens = compare_logprobs([(x.question.id, x.logprobs, y.logprobs)
                               for x, y in zip(a.answers, b.answers)])
    return {"labels": list(labels), "suite": a.suite, "seed": a.seed, "total": a.total,
            "score_a": a.score, "score_b": b.score, "identical": identical,
            "mismatches": mismatches, "logprobs": [a.logprobs, b.logprobs], "tokens": tokens}


def token_fidelity_line(fid: dict) -> str:
    """Token-level fidelity in one sentence (formulas: :mod:`loadgen.fidelity_tokens`)."""
    tokens = fid.get("tokens") or {}
    if not tokens.get("available"):
        statuses = [s for s in fid.get("logprobs") or () if s != "available"]
        why = "; ".join(dict.fromkeys(statuses)) or "no logprobs recorded"
        return f"Token-level fidelity: not available ({why})."
    kl = tokens["kl_mean"]
    kl_text = f"; mean KL(A‖B) ≈ {kl:.4f} nats per token (top-k estimate, leans low)" \
        if kl is not None else ""
    return (f"Token-level fidelity: top-1 agreement {tokens['top1_agreement']:.1%} over "
            f"{tokens['positions']} positions of the shared greedy prefixes; "
            f"{tokens['identical_token_sequences']}/{tokens['compared_questions']} answers "
            f"token-identical{kl_text}.")


def _side(answer: Any) -> dict:
    return {"response": answer.response, "extracted": answer.extracted,
            "correct": answer.correct, "error": answer.error}


def mismatch_line(mismatch: dict, labels: Sequence[str]) -> str:
    """``876 + 608 - 558 (expected 926): bf16 1026 ✗, qat 926 ✓``"""
    parts = []
    for label, side in zip(labels, (mismatch["a"], mismatch["b"])):
        said = side["extracted"] if side["extracted"] is not None else (
            f"[{side['error']}]" if side["error"] else "[no answer]")
        parts.append(f"{label} {said} {'✓' if side['correct'] else '✗'}")
    return f"{mismatch['label']} (expected {mismatch['expected']}): {', '.join(parts)}"


# --------------------------------------------------------------------------- drift


def drift_check(a1: dict[str, float | None], a2: dict[str, float | None],
                tolerance: float = DEFAULT_DRIFT_TOLERANCE,
                labels: dict[str, str] | None = None) -> dict:
    """Compare the first and the repeated baseline phase metric by metric.

    A metric is within tolerance when |A₂ − A₁| / A₁ ≤ tolerance. The verdict is
    "within tolerance" only when every metric measured in both phases is.
    """
    if not 0 < tolerance < 1:
        raise ConfigError(f"drift tolerance must be a fraction between 0 and 1, "
                          f"got {tolerance!r} (e.g. 0.05 for 5%)")
    rows = []
    for key, first in a1.items():
        difference = relative_difference(first, a2.get(key))
        if difference is None:
            continue
        rows.append({"metric": key, "label": (labels or {}).get(key, key), "a1": first,
                     "a2": a2[key], "relative_difference": difference,
                     "within": difference <= tolerance})
    ok = all(row["within"] for row in rows)
    verdict = VERDICT_OK if ok else VERDICT_DRIFT
    if not rows:
        verdict, ok = "not measured: no metric was measured in both baseline phases", False
    return {"tolerance": tolerance, "metrics": rows, "ok": ok, "verdict": verdict,
            "worst": max((row["relative_difference"] for row in rows), default=None)}


# --------------------------------------------------------------------------- confidence


def bootstrap_ratio_ci(a_values: Sequence[float], b_values: Sequence[float], *,
                       a_counts: Sequence[int] | None = None,
                       b_counts: Sequence[int] | None = None,
                       confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> dict | None:
    """Percentile-bootstrap interval on mean(B) / mean(A).

    Each side is resampled independently, with replacement, at its own size;
    ``*_counts`` weight distinct values (an HDR histogram's buckets), which is the
    same as resampling the expanded list. A fixed seed makes the interval
    reproducible. None when a side has no observation; with fewer than
    :data:`MIN_BOOTSTRAP_N` on a side, no interval (``low``/``high`` None, ``method`` says
    "n too small"): resampling 3 values says more about the resampling than the data.
    """
    sides = [_weighted(a_values, a_counts), _weighted(b_values, b_counts)]
    n_a, n_b = (int(counts.sum()) for _, counts in sides)
    if min(n_a, n_b) < 1:
        return None
    if min(n_a, n_b) < MIN_BOOTSTRAP_N:
        return {"ratio": None, "low": None, "high": None, "confidence": confidence,
                "n_a": n_a, "n_b": n_b, "method": "n too small"}
    rng = np.random.default_rng(seed)
    means = [_resampled_means(rng, values, counts, resamples) for values, counts in sides]
    ratios = means[1] / means[0]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    point = _mean(*sides[1]) / _mean(*sides[0])
    return {"ratio": float(point), "low": float(low), "high": float(high),
            "confidence": confidence, "n_a": int(sides[0][1].sum()),
            "n_b": int(sides[1][1].sum()), "method": "percentile bootstrap",
            "resamples": resamples, "seed": seed}


def _weighted(values: Sequence[float], counts: Sequence[int] | None):
    values = np.asarray(values, dtype=float)
    counts = np.ones(len(values), dtype=np.int64) if counts is None else np.asarray(counts)
    return values, counts


def _mean(values: np.ndarray, counts: np.ndarray) -> float:
    return float((values * counts).sum() / counts.sum())


def _resampled_means(rng: np.random.Generator, values: np.ndarray, counts: np.ndarray,
                     resamples: int) -> np.ndarray:
    n = int(counts.sum())
    draws = rng.multinomial(n, counts / n, size=resamples)  # (resamples, distinct values)
    return draws @ values / n


def noise_verdict(ratio_value: float | None, *, ci: dict | None = None,
                  noise: float | None = None) -> str | None:
    """Is a B/A difference distinguishable from noise?

    ``ci``: a bootstrap interval on the ratio; the difference is within noise when it contains
    1×. ``noise``: the run-to-run difference of that metric (A-B-A: |A₂ − A₁| / A₁); within
    noise when |B/A − 1| is not larger. None when there is nothing to judge by.
    """
    if ratio_value is None:
        return None
    if ci and ci.get("low") is not None:
        return WITHIN_NOISE if ci["low"] <= 1 <= ci["high"] else BEYOND_NOISE
    if noise is not None:
        return WITHIN_NOISE if abs(ratio_value - 1) <= noise else BEYOND_NOISE
    return None


def histogram_samples(encoded: str | None, metric: str) -> tuple[list[float], list[int]] | None:
    """Distinct values (in ``metric``'s reported unit) and their counts from an encoded HDR
    histogram."""
    if not encoded:
        return None
    from ..metrics import UNIT_SCALE, decode_histogram

    hist, scale = decode_histogram(encoded), UNIT_SCALE[metric]
    values, counts = [], []
    for item in hist.get_recorded_iterator():
        values.append(hist.get_highest_equivalent_value(item.value_iterated_to) * scale)
        counts.append(item.count_at_value_iterated_to)
    return (values, counts) if values else None


def decode_rate_ci(level_a: dict, level_b: dict) -> dict | None:
    """Bootstrap interval on mean decode tok/s B/A, from the per-request rates of two levels."""
    samples = [histogram_samples(dig(level, ("histograms", "decode_tokens_per_s")),
                                 "decode_tokens_per_s")
               for level in (level_a, level_b)]
    if not all(samples):
        return None
    (va, ca), (vb, cb) = samples
    return bootstrap_ratio_ci(va, vb, a_counts=ca, b_counts=cb)


# --------------------------------------------------------------------------- whole runs


def sweep_levels(result: dict) -> list[dict]:
    """The load levels of a results file: a scenario phase's sweep, else ``levels``."""
    sweep = dig(result, ("measurements", "sweep"))
    return list(sweep if sweep is not None else result.get("levels") or [])


def fidelity_of(result: dict) -> FidelityResult | None:
    data = result.get("fidelity")
    return FidelityResult.from_dict(data) if data else None


def fixed_length_mean_s(result: dict) -> float | None:
    times = dig(result, ("measurements", "fixed_length", "e2e_s")) or []
    return sum(times) / len(times) if times else None


def compare_runs(a: dict, b: dict, labels: tuple[str, str] = ("A", "B")) -> dict:
    """Everything ``loadgen compare`` prints, machine-readable."""
    fid_a, fid_b = fidelity_of(a), fidelity_of(b)
    single_a = dig(a, ("measurements", "single_stream"))
    single_b = dig(b, ("measurements", "single_stream"))
    out = {"labels": list(labels),
           "simulated": bool(a.get("simulated") or b.get("simulated")),
           "fidelity": compare_fidelity(fid_a, fid_b, labels) if fid_a and fid_b else None,
           "single_stream": None, "fixed_length": None,
           "levels": compare_levels(sweep_levels(a), sweep_levels(b))}
    if single_a and single_b:
        out["single_stream"] = compare_levels([single_a], [single_b])[0]
    mean_a, mean_b = fixed_length_mean_s(a), fixed_length_mean_s(b)
    if mean_a is not None and mean_b is not None:
        out["fixed_length"] = {"a_mean_s": mean_a, "b_mean_s": mean_b,
                               "ratio": ratio(mean_a, mean_b)}
    if out["fidelity"] is None and not out["levels"] and out["single_stream"] is None:
        raise ConfigError("nothing to compare: the two files share no load level and do not "
                          "both hold fidelity answers")
    return out


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.2f}" if abs(value) < 10_000 else f"{value:,.0f}"


def _ratio_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _level_table(row: dict, labels: Sequence[str]) -> list[str]:
    ratio = f"{labels[1]}/{labels[0]}"
    # Columns as wide as their headers (at least 14): long labels must not run together.
    wa, wb, wr = (max(14, len(text) + 2) for text in (labels[0], labels[1], ratio))
    lines = [f"  {row['label']}:", f"    {'metric':<22}{labels[0]:>{wa}}{labels[1]:>{wb}}{ratio:>{wr}}"]
    for key, label, _, _ in LEVEL_METRICS:
        m = row["metrics"][key]
        if m["a"] is None and m["b"] is None:
            continue
        noise = f"  {m['noise']}" if m.get("noise") else ""
        lines.append(f"    {label:<22}{_number(m['a']):>{wa}}{_number(m['b']):>{wb}}"
                     f"{_ratio_text(m['ratio']):>{wr}}{noise}")
    return lines


def format_comparison(result: dict) -> str:
    """The comparison as text for a terminal or a pull request comment."""
    labels = result["labels"]
    lines = []
    if result["simulated"]:
        lines += ["SIMULATED: at least one of these runs used the built-in simulator, "
                  "not a real model.", ""]
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
    if result["single_stream"] or result["levels"] or result["fixed_length"]:
        lines.append(f"Throughput and latency ({labels[1]} / {labels[0]}; "
                     f"above 1× is faster for tok/s, slower for latencies; \"within noise\": "
                     "the 95% bootstrap interval of the ratio contains 1×):")
    if result["single_stream"]:
        lines += _level_table({**result["single_stream"], "label": "single stream"}, labels)
    fixed = result["fixed_length"]
    if fixed:
        lines.append(f"  fixed-length generation: mean {fixed['a_mean_s']:.2f} s → "
                     f"{fixed['b_mean_s']:.2f} s ({_ratio_text(fixed['ratio'])})")
    for row in result["levels"]:
        lines += _level_table(row, labels)
    return "\n".join(lines).rstrip() + "\n"
