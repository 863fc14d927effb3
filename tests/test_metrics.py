"""Metric formulas, defined once in loadgen.metrics, checked against hand arithmetic."""

from loadgen.metrics import LevelMetrics, decode_histogram
from loadgen.record import RequestRecord

MS = 1_000_000


def make(intended, start, first, gaps_ms, tokens, error=None, incomplete=False):
    content = [first]
    for g in gaps_ms:
        content.append(content[-1] + g * MS)
    rec = RequestRecord(intended_ns=intended, start_ns=start, end_ns=content[-1],
                        content_ns=content, output_tokens=tokens, incomplete=incomplete)
    if error:
        rec.error_type = error
    return rec


def test_formulas_for_one_request():
    m = LevelMetrics()
    # sent at 0, first token at 200 ms, then 9 gaps of 50 ms: e2e 650 ms, 10 tokens
    m.add(make(0, 0, 200 * MS, [50] * 9, 10))
    s = m.summary()
    assert abs(s["ttft_ms"]["p50"] - 200) < 0.5
    assert abs(s["e2e_ms"]["p50"] - 650) < 1
    assert abs(s["itl_ms"]["p50"] - 50) < 0.1 and s["itl_ms"]["count"] == 9
    assert abs(s["tpot_ms"]["p50"] - 50) < 0.1  # (650-200)/(10-1)
    assert abs(s["decode_tokens_per_s"]["p50"] - 20) < 0.05  # 9 / 0.45 s
    assert s["schedule_lag_ms"]["count"] == 0  # closed loop: intended == start


def test_open_loop_latency_from_intended_time_and_schedule_lag():
    m = LevelMetrics()
    m.add(make(0, 30 * MS, 130 * MS, [10], 2))
    s = m.summary()
    assert abs(s["ttft_ms"]["p50"] - 130) < 0.5  # not 100: measured from intended
    assert abs(s["schedule_lag_ms"]["p50"] - 30) < 0.1


def test_failed_and_incomplete_are_counted_not_timed_but_gaps_kept():
    m = LevelMetrics()
    m.add(make(0, 0, 10 * MS, [5, 5], 3, error="http_500"))
    m.add(make(0, 0, 10 * MS, [5], 2, incomplete=True))
    assert (m.counts.completed, m.counts.failed, m.counts.incomplete) == (0, 1, 1)
    assert m.errors == {"http_500": 1}
    assert m.summary()["ttft_ms"]["count"] == 0
    assert m.summary()["itl_ms"]["count"] == 3
    assert m.counts.output_tokens == 5


def test_out_of_range_values_are_clamped_and_counted():
    m = LevelMetrics()
    m.add(make(0, 0, 2 * 3600 * 1000 * MS, [1], 2))  # TTFT of two hours
    assert m.counts.clamped >= 1
    assert m.summary()["ttft_ms"]["count"] == 1


def test_histograms_round_trip_and_merge():
    a, b = LevelMetrics(), LevelMetrics()
    a.add(make(0, 0, 100 * MS, [10] * 4, 5))
    b.add(make(0, 0, 300 * MS, [20] * 4, 5))
    merged = decode_histogram(a.encoded()["ttft_ms"])
    merged.add(decode_histogram(b.encoded()["ttft_ms"]))
    assert merged.get_total_count() == 2
    assert abs(merged.get_max_value() / 1000 - 300) < 1


def test_bucketed_gap_recording_equals_recording_every_gap():
    import random

    from loadgen.metrics import new_histogram

    rng = random.Random(7)
    metrics, reference = LevelMetrics(), new_histogram("itl_ms")
    total = 0
    for _ in range(40):
        t, content = 0, []
        for k in range(200):
            t += rng.randint(9_000_000, 11_000_000) if k % 5 else rng.randint(0, 5_000)
            content.append(t)
        metrics.add(RequestRecord(intended_ns=0, start_ns=0, end_ns=t, content_ns=content,
                                  output_tokens=200))
        for a, b in zip(content, content[1:]):
            reference.record_value((b - a) // 1000)
            total += (b - a) // 1000
    assert metrics.hists["itl_ms"].encode() == reference.encode()
    assert metrics.summary()["itl_ms"]["mean"] == total / reference.get_total_count() * 1e-3
