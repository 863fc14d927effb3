"""Comparing two runs: B/A ratios with intervals and verdicts, fidelity mismatches.

Everything here works on plain dicts (results files as loaded from JSON) and
returns plain dicts, so the summary, the reports and ``loadgen compare`` share it.
Conventions: A is the baseline (e.g. bf16), B the candidate (e.g. QAT), and a
ratio is always B / A. For throughputs a ratio above 1 means B is faster; for
latencies a ratio below 1 means B is faster. Intervals and verdicts: loadgen.stats.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .. import stats
from ..errors import ConfigError
from ..fidelity import FidelityResult
from ..fidelity_tokens import compare_logprobs

DEFAULT_DRIFT_TOLERANCE = stats.PRACTICAL_THRESHOLD
BELOW_RESOLUTION = "below timing resolution"
# A latency below this many times the client's timing resolution is not evidence.
RESOLUTION_FACTOR = 2.0

# (key, label, path into a level dict, which way is better)
LEVEL_METRICS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("output_tokens_per_s", "output tok/s", ("output_tokens_per_s",), "higher"),
    ("requests_per_s", "requests/s", ("requests_per_s",), "higher"),
    ("decode_tokens_per_s", "decode tok/s (mean)", ("decode_tokens_per_s", "mean"), "higher"),
    ("ttft_ms_p50", "TTFT p50 ms", ("ttft_ms", "p50"), "lower"),
    ("ttft_ms_p99", "TTFT p99 ms", ("ttft_ms", "p99"), "lower"),
    ("itl_ms_p50", "ITL p50 ms", ("itl_ms", "p50"), "lower"),
    ("itl_ms_p99", "ITL p99 ms", ("itl_ms", "p99"), "lower"),
    ("tpot_ms_mean", "TPOT mean ms", ("tpot_ms", "mean"), "lower"),
    ("e2e_ms_p50", "E2E p50 ms", ("e2e_ms", "p50"), "lower"),
    # Runs made with --slo (absent otherwise, and then not shown).
    ("goodput_requests_per_s", "goodput req/s", ("goodput", "requests_per_s"), "higher"),
    ("goodput_output_tokens_per_s", "goodput tok/s", ("goodput", "output_tokens_per_s"),
     "higher"),
)
# Where each metric's per-request samples are: (histogram, statistic, throughput from it).
# A closed loop's throughput is inversely proportional to its mean e2e latency, so its
# interval comes from the per-request e2e times (scaled to the measured ratio).
SAMPLED: dict[str, tuple[str, str | float, bool]] = {
    "output_tokens_per_s": ("e2e_ms", "mean", True),
    "requests_per_s": ("e2e_ms", "mean", True),
    "decode_tokens_per_s": ("decode_tokens_per_s", "mean", False),
    "ttft_ms_p50": ("ttft_ms", 0.5, False), "ttft_ms_p99": ("ttft_ms", 0.99, False),
    "itl_ms_p50": ("itl_ms", 0.5, False), "itl_ms_p99": ("itl_ms", 0.99, False),
    "tpot_ms_mean": ("tpot_ms", "mean", False), "e2e_ms_p50": ("e2e_ms", 0.5, False),
}


def ratio(a: float | None, b: float | None) -> float | None:
    """B / A, or None when either is missing or A is zero."""
    if a is None or b is None or a == 0:
        return None
    return b / a


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


def samples(level: dict | None, metric: str) -> stats.Samples | None:
    """A level's per-request samples of one histogram metric (None when not recorded)."""
    return stats.histogram_samples(dig(level, ("histograms", metric)), metric)


def timing_resolution_ms(level: dict) -> float | None:
    """How finely the client could time this level: the larger of its event-loop lag p90
    and its send lag p50 (a gap shorter than that is the client's, not the server's)."""
    figures = [dig(level, ("client", "loop_lag_ms", "p90")), dig(level, ("send_lag_ms", "p50"))]
    figures = [f for f in figures if isinstance(f, (int, float))]
    return max(figures) if figures else None


# Metrics of whole requests: not evidence when the client's own lag is a visible share of
# a request (then a busy client, not the server, sets them).
WHOLE_REQUEST = ("output_tokens_per_s", "requests_per_s", "e2e_ms_p50")
# Metrics timed token by token: the client's read timing is in them.
PER_TOKEN = ("ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99", "decode_tokens_per_s",
             "tpot_ms_mean")


def below_resolution(level: dict, key: str) -> str | None:
    """Why ``key`` of this level is not evidence, or None. Per-token metrics are not when
    tokens arrived several per socket read (ITL p50 of 0: the client read them late, in
    bunches, so which read a token fell in decides its time); an ITL p50 also not when it
    is below RESOLUTION_FACTOR × the level's timing resolution. Numbers from whole requests
    (e2e, throughput) are not when the client's event-loop lag p90 exceeds the practical
    threshold's share of the mean e2e."""
    if key in WHOLE_REQUEST:
        lag, e2e = dig(level, ("client", "loop_lag_ms", "p90")), dig(level, ("e2e_ms", "mean"))
        if isinstance(lag, (int, float)) and e2e and lag > stats.PRACTICAL_THRESHOLD * e2e:
            return (f"the client's event loop lagged {lag:.1f} ms (p90), more than "
                    f"{stats.PRACTICAL_THRESHOLD * 100:g} % of a request's {e2e:.0f} ms")
        return None
    if key not in PER_TOKEN:
        return None
    if dig(level, ("itl_ms", "p50")) == 0:
        return "tokens arrived several per socket read (ITL p50 is 0)"
    value, resolution = dig(level, ("itl_ms", "p50")), timing_resolution_ms(level)
    if key == "itl_ms_p50" and value is not None and resolution is not None \
            and value < RESOLUTION_FACTOR * resolution:
        return (f"ITL p50 {value:.2f} ms < {RESOLUTION_FACTOR:g}× the client's timing "
                f"resolution ({resolution:.2f} ms: loop lag p90, send lag p50)")
    return None


def metric_interval(key: str, level_a: dict, level_b: dict,
                    measured: float | None) -> dict | None:
    """B/A of one level metric with its bootstrap interval (loadgen.stats)."""
    if key not in SAMPLED:
        return None if measured is None else {"ratio": measured, "low": None, "high": None,
                                              "method": "no per-request samples"}
    metric, stat, throughput = SAMPLED[key]
    if throughput and (level_a.get("load") or {}).get("mode") not in (None, "concurrency"):
        return None if measured is None else {
            "ratio": measured, "low": None, "high": None,
            "method": "open-loop throughput follows the arrival rate"}
    ci = stats.ratio_interval([(samples(level_a, metric), samples(level_b, metric))], stat,
                              invert=throughput)
    if ci and throughput and measured and ci.get("ratio"):  # centre on the measured ratio
        scale = measured / ci["ratio"]
        ci = {**ci, "ratio": measured,
              **{k: ci[k] * scale for k in ("low", "high") if ci.get(k) is not None}}
    return ci


def compare_metric(key: str, better: str, level_a: dict, level_b: dict,
                   names: tuple[str, str], threshold: float) -> dict:
    """A, B, B/A, its interval and its verdict for one metric of a pair of levels."""
    a, b = (dig(level, dict((k, p) for k, _, p, _ in LEVEL_METRICS)[key])
            for level in (level_a, level_b))
    out = {"a": a, "b": b, "ratio": ratio(a, b)}
    reason = below_resolution(level_a, key) or below_resolution(level_b, key)
    if reason:
        return {**out, "ci": None, "verdict": BELOW_RESOLUTION, "reason": reason,
                "text": f"{BELOW_RESOLUTION}: {reason}"}
    out["ci"] = metric_interval(key, level_a, level_b, out["ratio"])
    return {**out, **stats.verdict(out["ci"], better=better, threshold=threshold,
                                   names=names)}


def compare_levels(levels_a: Sequence[dict], levels_b: Sequence[dict],
                   names: tuple[str, str] = ("A", "B"),
                   threshold: float = stats.PRACTICAL_THRESHOLD) -> list[dict]:
    """Levels present in both runs (matched by load), each metric with A, B, B/A, its
    interval and verdict."""
    by_key_b = {level_key(level): level for level in levels_b}
    rows = []
    for level_a in levels_a:
        level_b = by_key_b.get(level_key(level_a))
        if level_b is None:
            continue
        metrics = {key: compare_metric(key, better, level_a, level_b, names, threshold)
                   for key, _, _, better in LEVEL_METRICS}
        rows.append({"load": level_a.get("load"), "label": level_label(level_a),
                     "metrics": metrics, "n": [_completed(level_a), _completed(level_b)]})
    return rows


def _completed(level: dict) -> int | None:
    return dig(level, ("requests", "completed"))


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


def compare_runs(a: dict, b: dict, labels: tuple[str, str] = ("A", "B"),
                 threshold: float = stats.PRACTICAL_THRESHOLD) -> dict:
    """Everything ``loadgen compare`` prints, machine-readable."""
    fid_a, fid_b = fidelity_of(a), fidelity_of(b)
    single_a = dig(a, ("measurements", "single_stream"))
    single_b = dig(b, ("measurements", "single_stream"))
    names = (str(labels[0]), str(labels[1]))
    out = {"labels": list(labels), "threshold": threshold,
           "simulated": bool(a.get("simulated") or b.get("simulated")),
           "workload": [workload_line(a), workload_line(b)],
           "fidelity": compare_fidelity(fid_a, fid_b, labels) if fid_a and fid_b else None,
           "single_stream": None,
           "fixed_length": compare_fixed_length(a, b, names, threshold),
           "levels": compare_levels(sweep_levels(a), sweep_levels(b), names, threshold)}
    if single_a and single_b:
        out["single_stream"] = compare_levels([single_a], [single_b], names, threshold)[0]
    if out["fidelity"] is None and not out["levels"] and out["single_stream"] is None:
        raise ConfigError("nothing to compare: the two files share no load level and do not "
                          "both hold fidelity answers")
    return out


def compare_fixed_length(a: dict, b: dict, names: tuple[str, str],
                         threshold: float = stats.PRACTICAL_THRESHOLD) -> dict | None:
    """Mean seconds of the fixed-length generations, B/A with interval and verdict."""
    times = [[t for t in dig(r, ("measurements", "fixed_length", "e2e_s")) or [] if t]
             for r in (a, b)]
    if not all(times):
        return None
    mean_a, mean_b = (sum(t) / len(t) for t in times)
    ci = stats.ratio_interval([(stats.Samples.of(times[0]), stats.Samples.of(times[1]))])
    return {"a_mean_s": mean_a, "b_mean_s": mean_b, "ratio": ratio(mean_a, mean_b),
            "ci": ci, **stats.verdict(ci, better="lower", threshold=threshold, names=names)}


def workload_line(result: dict) -> str:
    """What a run sent, in one line: api, input/output tokens, dataset or trace, requests,
    seed, ignore_eos (from the results file's ``workload`` record, else its levels)."""
    from .workload import describe_workload  # (it reads levels with this module's helpers)

    return describe_workload(result)
