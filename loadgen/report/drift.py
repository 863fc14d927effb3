"""The A-B-A drift check: did the baseline move between A₁ and A₂, and is that small next
to the effect being measured?

Rule (README, "A-B-A drift"): drift is judged on metrics that are robust at the client's
timing resolution, each A₂/A₁ with its bootstrap interval (loadgen.stats), pooled over
the single stream and every sweep level (strata):

  * per-request decode tok/s (mean), TPOT (mean), TTFT (median, of the unloaded levels: the
    single stream and concurrency 1, where no request queues behind another), and output
    tok/s (from the per-request e2e times: a closed loop's throughput is inversely
    proportional to them);
  * a metric is "within tolerance" when its interval lies inside ±tolerance, "drift" when
    it lies wholly outside, "inconclusive" otherwise or with too few samples;
  * the verdict is "drift" when any pooled metric, or one level's decode tok/s or output
    tok/s (at a level where the client did not flag itself saturated), drifted; "within tolerance" when the pooled decode tok/s and output tok/s
    (the primary metrics: what the study claims) are within; else "inconclusive". TPOT and
    TTFT can show drift but do not withhold a "within" (at a simulator's 20× speed-up a
    30 ms TTFT from 5 requests straddles ±5 % on a busy machine).

Per-level rows of TPOT and TTFT are shown for diagnosis and do not vote. ITL p50 rows say "below timing
resolution" (and why) where tokens arrived several per read or faster than the client
could time them; they never vote. The sentence then sets the baseline's movement beside
the effect (pooled decode tok/s B/A₁).
"""

from __future__ import annotations

from .. import stats
from .compare import (
    BELOW_RESOLUTION,
    below_resolution,
    dig,
    level_key,
    level_label,
    samples,
    sweep_levels,
)

VERDICT_OK = "within tolerance"
VERDICT_DRIFT = "drift: the difference may not be the checkpoint"
VERDICT_INCONCLUSIVE = "inconclusive: too few samples to tell drift from noise"
NOT_MEASURED = "not measured: repeat the baseline phase (A-B-A) to check drift"
VERDICT_UNRESOLVED = ("inconclusive: no metric was measured above the client's timing "
                      "resolution in both baseline phases (see the reasons)")
# TTFT is judged where no request waits for another: under load it depends on how the
# requests happened to line up into batches (a property of the schedule, not the server).
UNLOADED = ("single stream", "concurrency 1")

# (key, label, histogram, statistic, throughput computed from it, primary). The primary
# rows carry the study's claim (decode speed, throughput): they must be within tolerance for
# the verdict to be; the others can only show drift.
DRIFT_METRICS = (
    ("decode_tokens_per_s", "decode tok/s per request (mean)", "decode_tokens_per_s", "mean",
     False, True),
    ("output_tokens_per_s", "output tok/s (from per-request e2e)", "e2e_ms", "mean", True,
     True),
    ("tpot_mean_ms", "TPOT mean ms", "tpot_ms", "mean", False, False),
    ("ttft_ms_p50", "TTFT p50 ms", "ttft_ms", 0.5, False, False),
)
# The comparison's key for each drift metric's resolution check (loadgen.report.compare).
RESOLUTION_KEYS = {"decode_tokens_per_s": "decode_tokens_per_s", "tpot_mean_ms": "tpot_ms_mean",
                   "ttft_ms_p50": "ttft_ms_p50", "output_tokens_per_s": "e2e_ms_p50"}


def strata(result_a: dict, result_b: dict) -> list[tuple[str, dict, dict]]:
    """``(label, level A, level B)``: the single stream and the sweep levels both ran."""
    out = []
    single = [dig(r, ("measurements", "single_stream")) for r in (result_a, result_b)]
    if all(single):
        out.append(("single stream", *single))
    by_key = {level_key(level): level for level in sweep_levels(result_b)}
    for level in sweep_levels(result_a):
        other = by_key.get(level_key(level))
        if other is not None:
            out.append((level_label(level), level, other))
    return out


def state(ci: dict | None, tolerance: float) -> str:
    """"within", "drift", "inconclusive" or "not measured" for one A₂/A₁ interval."""
    if not ci or ci.get("ratio") is None:
        return "not measured"
    if ci.get("low") is None:
        return "inconclusive"
    if 1 - tolerance <= ci["low"] and ci["high"] <= 1 + tolerance:
        return "within"
    if ci["low"] > 1 + tolerance or ci["high"] < 1 - tolerance:
        return "drift"
    return "inconclusive"


def pooled(levels: list[tuple[str, dict, dict]], metric: str, stat, invert: bool) -> dict | None:
    return stats.ratio_interval([(samples(a, metric), samples(b, metric))
                                 for _, a, b in levels], stat, invert=invert)


def _row(key: str, label: str, ci: dict | None, tolerance: float, level: str,
         primary: bool = False) -> dict:
    return {"metric": key, "label": label, "level": level, "ci": ci, "primary": primary,
            "state": state(ci, tolerance), "change": stats.change_text(ci),
            "n": None if not ci else [ci["n_a"], ci["n_b"]]}


def resolved(levels: list[tuple[str, dict, dict]], key: str) -> tuple[list, list[dict]]:
    """The levels where ``key`` is above the client's timing resolution in both phases, and
    the others with the reason."""
    keep, excluded = [], []
    for name, a, b in levels:
        reason = below_resolution(a, RESOLUTION_KEYS.get(key, key)) or below_resolution(
            b, RESOLUTION_KEYS.get(key, key))
        if reason:
            excluded.append({"metric": key, "level": name, "state": BELOW_RESOLUTION,
                             "reason": reason})
        else:
            keep.append((name, a, b))
    return keep, excluded


def drift_check(a1: dict, a2: dict, tolerance: float, *, candidate: dict | None = None,
                names: tuple[str, str, str | None] = ("A₁", "A₂", None)) -> dict:
    """The drift verdict of two results files of the baseline (A₁, A₂), and the sentence
    comparing it with the effect when the candidate's results file is given."""
    levels = strata(a1, a2)
    rows, detail, excluded = [], [], []
    for key, label, metric, stat, invert, primary in DRIFT_METRICS:
        usable, dropped = resolved(levels, key)
        excluded += [{**d, "label": label} for d in dropped]
        scope = usable
        if metric == "ttft_ms":
            scope = [s for s in usable if s[0] in UNLOADED] or usable
        where = "all levels" if len(scope) == len(levels) else ", ".join(s[0] for s in scope)
        rows.append(_row(key, label, pooled(scope, metric, stat, invert), tolerance,
                         where or "none above timing resolution", primary))
        detail += [{**_row(key, label, pooled([s], metric, stat, invert), tolerance, s[0],
                           primary), "votes": primary and not _saturated(s)} for s in usable]
    excluded += [{"metric": "itl_ms_p50", "label": "ITL p50 ms", "level": name,
                  "state": BELOW_RESOLUTION, "reason": reason}
                 for name, a, b in levels
                 for reason in [below_resolution(a, "itl_ms_p50")
                                or below_resolution(b, "itl_ms_p50")] if reason]
    verdict, ok = _verdict(rows, detail)
    # The baseline's movement beside the effect, on the first primary metric that has both
    # (else the first that has the movement).
    measured = [row for row in rows if row["primary"] and row["ci"]
                and row["ci"].get("ratio") is not None]
    pairs = [(row, _effect(a1, candidate, row, levels)) for row in measured]
    moved, effect = next(((r, e) for r, e in pairs if e is not None),
                         pairs[0] if pairs else (None, None))
    return {"tolerance": tolerance, "verdict": verdict, "ok": ok,
            "state": {True: "within", False: "drift", None: "inconclusive"}[ok],
            "metrics": rows, "levels": detail, "excluded": excluded,
            "baseline_moved": moved["ci"] if moved else None,
            "moved_metric": moved["label"] if moved else None, "effect": effect,
            "sentence": sentence(verdict, moved, effect, tolerance, names)}


def _effect(a1: dict, candidate: dict | None, moved: dict,
            levels: list[tuple[str, dict, dict]]) -> dict | None:
    """B/A₁ on ``moved``'s metric, over the levels both comparisons can judge."""
    if candidate is None:
        return None
    key, _, metric, stat, invert, _ = next(m for m in DRIFT_METRICS if m[0] == moved["metric"])
    judged = {s[0] for s in resolved(levels, key)[0]}
    same = [s for s in resolved(strata(a1, candidate), key)[0] if s[0] in judged]
    if not same:
        return None
    effect = pooled(same, metric, stat, invert)
    return effect if effect and effect.get("ratio") is not None else None


def _saturated(stratum: tuple[str, dict, dict]) -> bool:
    """The client flagged itself saturated at this level in either phase: its timings hold
    the client's own delay, so that level alone cannot call drift (the pools still count)."""
    return any(dig(level, ("client", "saturated")) for level in stratum[1:])


def _verdict(rows: list[dict], detail: list[dict]) -> tuple[str, bool | None]:
    """Drift when a pooled row, or one level's primary row where the client was not
    saturated, lies wholly outside the tolerance (a server that slowed at one load only is
    drift too); within when every pooled primary row with an interval lies inside it; else
    inconclusive."""
    judged = [row for row in rows if row["ci"] and row["ci"].get("low") is not None]
    primary = [row["state"] for row in judged if row["primary"]]
    if not any(row["ci"] for row in rows):
        return VERDICT_UNRESOLVED, None
    voters = judged + [row for row in detail if row["votes"]]
    if any(row["state"] == "drift" for row in voters):
        return VERDICT_DRIFT, False
    if primary and all(s == "within" for s in primary):
        return VERDICT_OK, True
    return VERDICT_INCONCLUSIVE, None


def sentence(verdict: str, moved: dict | None, effect: dict | None, tolerance: float,
             names: tuple[str, str, str | None]) -> str:
    """"baseline bf16-a moved +0.4 % [−0.6, +1.3] (decode tok/s per request, A₂/A₁) while
    qat/bf16-a is 2.06× [2.03, 2.09]: within ±5 %, the difference is the checkpoint"."""
    a1, _, b = names
    if moved is None:
        return verdict
    text = f"baseline {a1} moved {moved['change']} ({moved['label']}, A₂/A₁)"
    if effect is not None and effect.get("ratio") is not None and b:
        text += f" while {b}/{a1} is {stats.times_text(effect)} (same metric and levels)"
    if verdict == VERDICT_OK:
        return f"{text}: within ±{tolerance * 100:g} %, the difference is the checkpoint"
    if verdict == VERDICT_DRIFT:
        return f"{text}: drift beyond ±{tolerance * 100:g} %, the difference may not be the checkpoint"
    return f"{text}: {verdict}"
