"""A-vs-B statistics, defined once: ratios with bootstrap intervals, and verdicts that use a
practical threshold as well as the interval.

Every comparison in loadgen (``loadgen compare``, the report's comparison and headline,
the A-B-A drift check) goes through this module.

Samples. A side is a :class:`Samples`: distinct values with counts (an HDR histogram's
buckets, or a plain list). The unit of a sample is a request (TTFT, e2e, TPOT, decode
tok/s of one request) or a repeat (one fixed-length generation).

Interval. ``ratio = stat(B) / stat(A)`` where ``stat`` is the mean or a quantile. The
95 % interval is a percentile bootstrap: each side is resampled with replacement at its
own size (``RESAMPLES`` times, seed ``SEED``: the same data always gives the same
interval). Above ``EXPAND_MAX`` observations a side (per-token ITL) the resampling
distribution is replaced by its normal approximation (standard error of the mean, or of a
quantile from its order-statistic interval). Several strata (load levels) pool into one ratio: the weighted geometric mean
of the strata's ratios, ``exp(Σ wᵢ·ln rᵢ / Σ wᵢ)`` with ``wᵢ = 2 / (1/n_Aᵢ + 1/n_Bᵢ)``,
resampled stratum by stratum. Below ``min_samples(stat)`` observations on a side there
is no interval ("n too small"): resampling 3 values says more about resampling than data.

Verdict (equivalence testing, TOST-style, with a practical threshold ``t``, default 5 %):
  * "no practical difference": the whole interval lies inside [1 − t, 1 + t];
  * "B faster by X % [lo, hi]" (or slower, cheaper, ...): the whole interval lies outside
    it, on one side (X is how much the metric changed: for a latency, the time saved);
  * "inconclusive": anything else (the interval straddles a threshold), or n too small;
    with an estimate of the n per side that would decide it:
    ``n_need ≈ n · (z·se / margin)²`` where ``se`` is the bootstrap standard error of
    ln(ratio) at the current n and ``margin`` is the distance of ln(ratio) from the
    threshold. A statistically significant 0.3 % is "no practical difference".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
PRACTICAL_THRESHOLD = 0.05  # the smallest B/A difference that matters: ±5 %
MIN_N = 5  # fewer observations on a side: no interval
NEED_CAP = 100_000  # "need ≈ N" above this is said as "more than"
EXPAND_MAX = 1_000  # up to this many a side, resample them; above, a normal approximation

EQUIVALENT = "no practical difference"
INCONCLUSIVE = "inconclusive"
# Which way is better for a metric: "higher" (tok/s), "lower" (latency, cost), None (neutral).
WORDS = {"higher": ("faster", "slower"), "lower": ("faster", "slower"),
         "cost": ("cheaper", "dearer"), None: ("higher", "lower")}


@dataclass(frozen=True)
class Samples:
    """Distinct values (ascending) and how often each was observed."""
    values: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, values: Sequence[float], counts: Sequence[int] | None = None) -> "Samples":
        values = np.asarray(values, dtype=float)
        counts = (np.ones(len(values), dtype=np.int64) if counts is None
                  else np.asarray(counts, dtype=np.int64))
        keep = np.isfinite(values) & (counts > 0)
        order = np.argsort(values[keep], kind="stable")
        return cls(values[keep][order], counts[keep][order])

    @property
    def n(self) -> int:
        return int(self.counts.sum())


def min_samples(stat: str | float) -> int:
    """Observations a side needs for an interval: 5 for a mean or median, and enough that
    a tail quantile is not just the largest value seen (100 for p99)."""
    if stat == "mean":
        return MIN_N
    return max(MIN_N, math.ceil(1 / (1 - float(stat))) if float(stat) > 0.5 else MIN_N)


def statistic(samples: Samples, stat: str | float) -> float:
    """The mean, or the ``stat`` quantile (0.5: median; the lower value at a tie)."""
    return float(_resampled(samples.values, samples.counts[None, :], stat)[0])


def _resampled(values: np.ndarray, draws: np.ndarray, stat: str | float) -> np.ndarray:
    """``stat`` of each row of ``draws`` (counts per distinct value)."""
    n = draws.sum(axis=1)
    if stat == "mean":
        return draws @ values / n
    rank = np.ceil(float(stat) * n).clip(min=1)
    index = (draws.cumsum(axis=1) >= rank[:, None]).argmax(axis=1)
    return values[index]


def _boot(rng: np.random.Generator, samples: Samples, stat: str | float) -> np.ndarray:
    """``stat`` of RESAMPLES resamples (with replacement, size n) of ``samples``."""
    n = samples.n
    if n <= EXPAND_MAX:  # draw observations by index: fast for per-request samples
        expanded = np.repeat(samples.values, samples.counts)
        draws = expanded[rng.integers(0, n, size=(RESAMPLES, n))]
        if stat == "mean":
            return draws.mean(axis=1)
        k = max(math.ceil(float(stat) * n), 1) - 1
        return np.partition(draws, k, axis=1)[:, k]
    return _normal_boot(rng, samples, stat)


def _normal_boot(rng: np.random.Generator, samples: Samples, stat: str | float) -> np.ndarray:
    """Thousands of observations (per-token ITL): the resampling distribution's normal
    approximation, centred on the statistic: the mean's standard error s/√n, or a
    quantile's from its order-statistic interval (ranks n·q ± z·√(n·q·(1 − q))), in logs."""
    n, point = samples.n, statistic(samples, stat)
    z = _z(CONFIDENCE)
    if stat == "mean":
        var = float(((samples.values - point) ** 2 * samples.counts).sum() / (n - 1))
        return point + math.sqrt(var / n) * rng.standard_normal(RESAMPLES)
    q = float(stat)
    half = z * math.sqrt(n * q * (1 - q))
    cumulative = samples.counts.cumsum()
    low_i, high_i = (int(np.searchsorted(cumulative, max(min(r, n), 1)))
                     for r in (n * q - half, n * q + half))
    low, high = samples.values[low_i], samples.values[min(high_i, len(samples.values) - 1)]
    if low <= 0 or point <= 0:
        return np.full(RESAMPLES, point)
    se_log = (math.log(high) - math.log(low)) / (2 * z)
    return np.exp(math.log(point) + se_log * rng.standard_normal(RESAMPLES))


def _z(confidence: float) -> float:
    return {0.95: 1.959964, 0.99: 2.575829}.get(confidence, 1.959964)


def ratio_interval(pairs: Sequence[tuple[Samples | None, Samples | None]],
                   stat: str | float = "mean", *, invert: bool = False) -> dict | None:
    """B/A (A/B with ``invert``, e.g. a throughput from latencies) with its bootstrap
    interval, pooled over the ``(A, B)`` strata given. None when no stratum has data on
    both sides; ``low``/``high`` None when a side is below :func:`min_samples`."""
    strata = [(a, b) for a, b in pairs if a is not None and b is not None and a.n and b.n]
    if len(strata) > 1:  # pooling: a stratum of one observation a side has no spread
        strata = [(a, b) for a, b in strata if min(a.n, b.n) >= 2] or strata
    if not strata:
        return None
    n_a, n_b = sum(a.n for a, _ in strata), sum(b.n for _, b in strata)  # all levels' n
    out = {"ratio": None, "low": None, "high": None, "confidence": CONFIDENCE,
           "n_a": n_a, "n_b": n_b, "stat": stat, "strata": len(strata)}
    logs, weights = [], []
    for a, b in strata:
        sa, sb = statistic(a, stat), statistic(b, stat)
        if sa <= 0 or sb <= 0:
            return {**out, "method": "not positive"}
        logs.append(math.log(sb / sa))
        weights.append(2 / (1 / a.n + 1 / b.n))
    sign = -1 if invert else 1
    point = sign * float(np.average(logs, weights=weights))
    out["ratio"] = math.exp(point)
    if min(n_a, n_b) < min_samples(stat):
        return {**out, "method": "n too small", "se": _rough_se(strata, stat)}
    rng = np.random.default_rng(SEED)
    boots = np.array([np.log(_boot(rng, b, stat)) - np.log(_boot(rng, a, stat))
                      for a, b in strata])
    pooled = sign * np.average(boots, axis=0, weights=weights)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(pooled, [tail, 100 - tail])
    return {**out, "low": float(math.exp(low)), "high": float(math.exp(high)),
            "method": "percentile bootstrap", "resamples": RESAMPLES, "seed": SEED,
            "se": float(np.std(pooled))}


def _rough_se(strata, stat) -> float | None:
    """Standard error of ln(ratio) from the coefficients of variation (delta method), for
    sides too small to resample; None from single observations."""
    terms = []
    for a, b in strata:
        for s in (a, b):
            if s.n < 2:
                return None
            mean = statistic(s, "mean")
            var = float(((s.values - mean) ** 2 * s.counts).sum() / (s.n - 1))
            factor = 1.0 if stat == "mean" else 1.25  # a median's efficiency vs a mean's
            terms.append(factor ** 2 * var / mean ** 2 / s.n)
    return math.sqrt(sum(terms) / len(strata) ** 2) if terms else None


# --------------------------------------------------------------------------- verdicts


def verdict(ci: dict | None, *, better: str | None = "higher",
            threshold: float = PRACTICAL_THRESHOLD, names: tuple[str, str] = ("A", "B")) -> dict:
    """``{"verdict": code, "text": sentence}``; codes: "equivalent", "b_better", "b_worse",
    "inconclusive", "not measured". ``better``: "higher", "lower", "cost" or None."""
    if not ci or ci.get("ratio") is None:
        return {"verdict": "not measured", "text": "not measured on both sides"}
    low_t, high_t = 1 - threshold, 1 + threshold
    if ci.get("low") is None and ci.get("method") not in (None, "n too small"):
        return {"verdict": INCONCLUSIVE, "text": f"inconclusive: no interval ({ci['method']})"}
    if ci.get("low") is None:
        need = _need(ci, threshold)
        return {"verdict": INCONCLUSIVE, "need_n": need,
                "text": f"inconclusive: n too small (n={ci['n_a']}/{ci['n_b']}; need ≈ "
                        f"{_need_text(need, ci, threshold)} per side)"}
    if low_t <= ci["low"] and ci["high"] <= high_t:
        return {"verdict": "equivalent",
                "text": f"{EQUIVALENT} ({times_text(ci)}, within ±{threshold * 100:g} %)"}
    if ci["low"] > high_t or ci["high"] < low_t:
        return _difference(ci, better, names[1])
    need = _need(ci, threshold)
    return {"verdict": INCONCLUSIVE, "need_n": need,
            "text": f"inconclusive: {times_text(ci)} straddles ±{threshold * 100:g} % "
                    f"(need ≈ {_need_text(need, ci, threshold)} per side)"}


def _difference(ci: dict, better: str | None, b_name: str) -> dict:
    up, down = WORDS[better]
    higher = ci["ratio"] > 1
    if better in ("lower", "cost"):  # a lower latency or price is the good direction
        word = down if higher else up
    else:
        word = up if higher else down
    good = (higher and better == "higher") or (not higher and better in ("lower", "cost"))
    changes = sorted(abs(r - 1) * 100 for r in (ci["low"], ci["high"]))
    code = "b_better" if good else ("b_worse" if better else "different")
    return {"verdict": code,
            "text": f"{b_name} {word} by {abs(ci['ratio'] - 1) * 100:.1f} % "
                    f"[{changes[0]:.1f}, {changes[1]:.1f}]"}


def _need(ci: dict, threshold: float) -> int | None:
    """n per side that would put the interval wholly inside or outside ±threshold."""
    se = ci.get("se")
    n = min(ci["n_a"], ci["n_b"]) / max(ci.get("strata", 1), 1)
    if not se or se <= 0 or ci["ratio"] is None:
        return None
    z = _z(ci["confidence"])
    margin = abs(abs(math.log(ci["ratio"])) - math.log(1 + threshold))
    if margin < 1e-9:
        return NEED_CAP + 1
    need = math.ceil(n * (z * se / margin) ** 2)
    return min(max(need, min_samples(ci.get("stat", "mean"))), NEED_CAP + 1)


def _need_text(need: int | None, ci: dict, threshold: float) -> str:
    if need is None:
        return f"{min_samples(ci.get('stat', 'mean'))} or more"
    return f"more than {NEED_CAP:,}" if need > NEED_CAP else f"{need:,}"


def times_text(ci: dict | None) -> str:
    """``2.06× [2.03, 2.09]``; the interval left out when there is none."""
    if not ci or ci.get("ratio") is None:
        return "–"
    if ci.get("low") is None:
        return f"{ci['ratio']:.2f}×"
    return f"{ci['ratio']:.2f}× [{ci['low']:.2f}, {ci['high']:.2f}]"


def change_text(ci: dict | None) -> str:
    """``+0.4 % [−0.6, +1.3]``: B/A as a relative change with its interval."""
    if not ci or ci.get("ratio") is None:
        return "–"
    point = f"{_pct(ci['ratio'])} %"
    if ci.get("low") is None:
        return point
    return f"{point} [{_pct(ci['low'])}, {_pct(ci['high'])}]"


def _pct(ratio: float) -> str:
    """``1.004`` -> ``+0.4``; never ``-0.0``."""
    return f"{round((ratio - 1) * 100, 1) + 0.0:+.1f}"


def histogram_samples(encoded: str | None, metric: str) -> Samples | None:
    """The per-request values (reported unit) of an encoded HDR histogram of a results file."""
    if not encoded:
        return None
    return _decoded(encoded, metric)


@functools.lru_cache(maxsize=256)  # a report reads each histogram for several comparisons
def _decoded(encoded: str, metric: str) -> Samples | None:
    from .metrics import UNIT_SCALE, decode_histogram

    hist, scale = decode_histogram(encoded), UNIT_SCALE[metric]
    # The counts array directly (hdrh's recorded-value iterator walks every bucket in Python).
    counts = np.ctypeslib.as_array(hist.counts)[:hist.counts_len]
    indices = np.flatnonzero(counts)
    values = [hist.get_highest_equivalent_value(hist.get_value_from_index(int(i))) * scale
              for i in indices]
    return Samples.of(values, counts[indices]) if values else None
