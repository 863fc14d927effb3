"""loadgen.stats against known distributions: interval coverage, verdicts at the threshold's
boundaries, pooling over strata, weighted samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen import stats
from loadgen.stats import Samples, ratio_interval, verdict


def _ci(ratio, low, high, n=40):
    return {"ratio": ratio, "low": low, "high": high, "n_a": n, "n_b": n,
            "confidence": 0.95, "stat": "mean", "se": 0.01, "strata": 1}


def test_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    """Lognormal request times (σ 0.3), B's mean 1.5× A's: the 95 % interval from 30
    requests a side should hold 1.5 in roughly 95 % of 150 simulated studies."""
    rng = np.random.default_rng(7)
    true_ratio = 1.5
    trials, hits = 150, 0
    for _ in range(trials):
        a = Samples.of(rng.lognormal(0.0, 0.3, 30))
        b = Samples.of(rng.lognormal(math.log(true_ratio), 0.3, 30))
        ci = ratio_interval([(a, b)])
        hits += ci["low"] <= true_ratio <= ci["high"]
    coverage = hits / trials
    # The percentile bootstrap under-covers a little at n=30; far from 95 % means a bug.
    assert 0.86 <= coverage <= 0.99, coverage


def test_median_interval_covers_the_true_median_ratio():
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(60):
        a = Samples.of(rng.exponential(10.0, 40))
        b = Samples.of(rng.exponential(20.0, 40))  # medians 10 ln2 and 20 ln2: ratio 2
        ci = ratio_interval([(a, b)], 0.5)
        hits += ci["low"] <= 2.0 <= ci["high"]
    assert hits >= 50  # ≥ 83 % of 60 (nominal 95 %)


def test_same_data_same_interval_and_weights_equal_expansion():
    values, counts = [50.0, 51.0, 52.0], [3, 10, 3]
    expanded = [v for v, c in zip(values, counts) for _ in range(c)]
    weighted = ratio_interval([(Samples.of(values, counts),
                                Samples.of([2 * v for v in values], counts))])
    plain = ratio_interval([(Samples.of(expanded), Samples.of([2 * v for v in expanded]))])
    # Counts are the expanded sample: the same distribution of resamples (other draws).
    assert weighted["ratio"] == pytest.approx(2.0) and weighted["n_a"] == 16
    assert weighted["low"] == pytest.approx(plain["low"], abs=0.01)
    assert weighted["high"] == pytest.approx(plain["high"], abs=0.01)
    assert weighted == ratio_interval([(Samples.of(values, counts),
                                        Samples.of([2 * v for v in values], counts))])


def test_too_few_samples_give_no_interval_but_a_needed_n():
    ci = ratio_interval([(Samples.of([10.0, 11.0, 12.0]), Samples.of([10.5, 11.0, 12.5]))])
    assert ci["low"] is None and ci["method"] == "n too small" and ci["n_a"] == 3
    said = verdict(ci)
    assert said["verdict"] == stats.INCONCLUSIVE
    assert said["text"].startswith("inconclusive: n too small (n=3/3; need ≈ ")
    assert said["need_n"] > 3
    # A p99 needs 100 requests a side before it is a percentile at all.
    assert stats.min_samples(0.99) == 100 and stats.min_samples("mean") == 5
    assert ratio_interval([(None, Samples.of([1.0]))]) is None


@pytest.mark.parametrize("low, high, expected", [
    (0.95, 1.05, "equivalent"),        # inside ±5 %, boundaries included
    (0.96, 1.051, "inconclusive"),     # pokes out by 0.1 %: can't call it equivalent
    (1.0501, 1.2, "b_better"),         # wholly beyond +5 %: B faster
    (0.80, 0.9499, "b_worse"),         # wholly below −5 %: B slower
    (1.01, 1.08, "inconclusive"),      # significant, but maybe not practically
])
def test_verdicts_at_the_threshold_boundaries(low, high, expected):
    said = verdict(_ci((low + high) / 2, low, high), better="higher", names=("bf16", "qat"))
    assert said["verdict"] == expected, said
    if expected == "b_better":
        assert said["text"].startswith("qat faster by ")
    if expected == "inconclusive":
        assert "need ≈" in said["text"]


def test_a_significant_but_tiny_difference_is_no_practical_difference():
    """0.3 % faster with a tight interval excluding 1×: not "beyond noise", not a win."""
    rng = np.random.default_rng(11)
    a = Samples.of(rng.normal(100.0, 0.5, 300))
    b = Samples.of(rng.normal(100.3, 0.5, 300))
    ci = ratio_interval([(a, b)])
    assert ci["low"] > 1.0  # statistically significant
    said = verdict(ci)
    assert said["verdict"] == "equivalent"
    assert said["text"].startswith(stats.EQUIVALENT)


def test_latency_and_cost_directions():
    lower = verdict(_ci(0.5, 0.48, 0.52), better="lower", names=("a", "b"))
    assert lower["verdict"] == "b_better" and lower["text"] == "b faster by 50.0 % [48.0, 52.0]"
    dearer = verdict(_ci(1.3, 1.2, 1.4), better="cost", names=("a", "b"))
    assert dearer["verdict"] == "b_worse" and dearer["text"].startswith("b dearer by 30.0 %")


def test_pooling_strata_keeps_each_levels_own_scale():
    """Two levels at very different speeds, B twice as fast at both: pooled 2×."""
    rng = np.random.default_rng(5)
    slow = (Samples.of(rng.normal(50, 1, 20)), Samples.of(rng.normal(100, 2, 20)))
    fast = (Samples.of(rng.normal(500, 10, 20)), Samples.of(rng.normal(1000, 20, 20)))
    ci = ratio_interval([slow, fast])
    assert ci["strata"] == 2 and ci["n_a"] == 40
    assert ci["low"] < 2.0 < ci["high"] and ci["high"] - ci["low"] < 0.05
    inverted = ratio_interval([slow, fast], invert=True)
    assert inverted["ratio"] == pytest.approx(1 / ci["ratio"])


def test_change_text_never_says_minus_zero():
    assert stats.change_text(_ci(0.99999, 0.999, 1.004)) == "+0.0 % [-0.1, +0.4]"
    assert stats.times_text(_ci(2.061, 2.031, 2.094)) == "2.06× [2.03, 2.09]"


def test_thousands_of_per_token_values_use_the_normal_approximation_and_still_cover():
    """Above EXPAND_MAX a side (per-token ITL) the interval comes from the order-statistic
    standard error: it must hold its own point and cover the true p99 ratio."""
    rng = np.random.default_rng(13)
    true_ratio = 1.2  # lognormal p99 scales with the median
    hits = 0
    for _ in range(60):
        a = Samples.of(rng.lognormal(0.0, 0.4, 3000))
        b = Samples.of(rng.lognormal(math.log(true_ratio), 0.4, 3000))
        ci = ratio_interval([(a, b)], 0.99)
        assert ci["low"] <= ci["ratio"] <= ci["high"]
        hits += ci["low"] <= true_ratio <= ci["high"]
    assert hits >= 50  # ≥ 83 % of 60 (nominal 95 %)
