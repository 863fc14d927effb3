"""The client timeline, the steady-state check, vLLM metric names across versions and the
knee search's bisection (no servers: records, recorded /metrics texts, probe verdicts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.knee import KneePlan, KneeSearch, format_knee, judge
from loadgen.record import RequestRecord
from loadgen.report.document import Paragraph
from loadgen.report.server_section import knee_section
from loadgen.slo import parse_slo
from loadgen.timeline import ClientTimeline, steady_state
from loadgen.vllm.metric_names import read_scrape
from loadgen.vllm.server_metrics import parse_metrics, series_of

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_metrics"
S = 1_000_000_000  # ns per second
T0 = 50 * S


def _record(start_s: float, first_s: float, end_s: float, tokens: int, chunks: int,
            error: str | None = None) -> RequestRecord:
    step = (end_s - first_s) / max(chunks - 1, 1)
    rec = RequestRecord(intended_ns=T0 + int(start_s * S), start_ns=T0 + int(start_s * S),
                        end_ns=T0 + int(end_s * S), output_tokens=tokens,
                        content_ns=[T0 + int((first_s + i * step) * S) for i in range(chunks)])
    if error:
        rec.error_type = error
    return rec


def test_timeline_rows_place_starts_tokens_and_finishes_by_their_own_time():
    timeline = ClientTimeline()
    timeline.begin(T0)
    # Starts in second 0, first token at 0.5 s, tokens over 0.5..2.5 s, ends in second 2.
    timeline.add(_record(0.1, 0.5, 2.5, tokens=40, chunks=5))
    timeline.add(_record(0.2, 0.3, 0.9, tokens=10, chunks=2))
    timeline.add(_record(1.5, 1.6, 1.7, tokens=0, chunks=0, error="http_500"))
    columns = timeline.snapshot()["columns"]
    assert columns["t_s"] == [0.0, 1.0, 2.0]
    assert columns["started"] == [2, 1, 0]
    assert columns["finished"] == [1, 1, 1]
    assert columns["failed"] == [0, 1, 0]
    assert columns["in_flight"] == [1, 1, 0]
    # 40 tokens over 5 chunks at 0.5, 1.0, 1.5, 2.0, 2.5 s; 10 over 2 chunks at 0.3, 0.9 s.
    assert columns["output_tokens_per_s"] == [18.0, 16.0, 16.0]
    # TTFT of the request finished in second 0 (0.1 s) and in second 2 (0.4 s), in ms
    # within the 2-digit histogram's 1 %; none completed in second 1.
    assert columns["ttft_ms_p50"][0] == pytest.approx(100, rel=0.01)
    assert columns["ttft_ms_p50"][1] is None
    assert columns["ttft_ms_p99"][2] == pytest.approx(400, rel=0.01)
    assert columns["itl_ms_p50"][2] == pytest.approx(500, rel=0.01)


def test_last_row_rate_is_over_the_part_of_the_second_the_level_covered():
    timeline = ClientTimeline()
    timeline.begin(T0)
    timeline.add(_record(0.0, 1.1, 1.2, tokens=10, chunks=2))
    columns = timeline.snapshot(end_ns=T0 + int(1.25 * S))["columns"]
    assert columns["output_tokens_per_s"] == [0.0, 40.0]  # 10 tokens in 0.25 s


def test_steady_state_bounds_the_fitted_change_over_the_middle_80_percent():
    t = [float(i) for i in range(20)]
    flat = steady_state(t, [100.0 + (i % 2) for i in range(20)])
    assert flat["steady"] is True and abs(flat["change"]) < 0.05 and flat["rows"] == 16
    rising = steady_state(t, [50.0 + 10 * i for i in range(20)])
    assert rising["steady"] is False and "rose" in rising["reason"]
    # The ramp-up and drain rows (first and last 10 %) do not count.
    edges = steady_state(t, [0.0, 0.0] + [100.0] * 16 + [5.0, 5.0])
    assert edges["steady"] is True and edges["change"] == 0
    short = steady_state(t[:4], [1.0, 2.0, 3.0, 4.0])
    assert short["steady"] is None and "too short" in short["reason"]


def _scrape(name: str) -> dict:
    return read_scrape(parse_metrics((FIXTURES / name).read_text()))


def test_metric_names_of_three_vllm_versions_map_to_ours():
    old, new, real = (_scrape(f"vllm-{v}.metrics.txt") for v in ("0.8.5", "0.27.1", "0.32.0-cpu"))
    assert old["families"]["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert old["families"]["itl"] == "vllm:time_per_output_token_seconds"
    assert old["families"]["prefix_cache_queries"] == "vllm:gpu_prefix_cache_queries"
    for scrape in (new, real):
        assert scrape["families"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
        assert scrape["families"]["itl"] == "vllm:inter_token_latency_seconds"
    assert real["families"]["prefix_cache_queries"] == "vllm:prefix_cache_queries"
    assert real["families"]["tpot"] == "vllm:request_time_per_output_token_seconds"
    # The recorded 0.32 text followed 24 requests of 16 tokens each.
    assert real["values"]["ttft"].count == 24
    assert real["values"]["generation_tokens"] == 24 * 16
    summary = real["values"]["ttft"].summary_ms()
    assert summary["mean_ms"] > 0 and summary["p50_le_ms"] >= 0
    # Names the table does not know are kept raw, under their own name.
    assert "vllm:request_success" in real["raw"]
    assert not any(name.endswith("_created") for name in real["raw"])


def test_counters_become_rates_and_the_prefix_cache_a_hit_rate():
    before = {"preemptions": 3, "generation_tokens": 100, "prefix_cache_queries": 200,
              "prefix_cache_hits": 50}
    now = {"preemptions": 7, "generation_tokens": 600, "prefix_cache_queries": 400,
           "prefix_cache_hits": 200, "requests_waiting": 5}
    row = series_of(now, before, 2.0)
    assert row["preemptions_per_s"] == 2.0 and row["generation_tokens_per_s"] == 250.0
    assert row["prefix_cache_hit_rate"] == 0.75 and row["num_requests_waiting"] == 5
    assert series_of(now, None, 0.0)["preemptions_per_s"] is None  # first scrape: no rate
    reset = series_of({"preemptions": 1}, {"preemptions": 9}, 1.0)  # a server restart
    assert reset["preemptions_per_s"] is None


def _search(knee: float, **kwargs) -> list[float]:
    """The loads a search probes when every load up to ``knee`` passes."""
    plan = KneePlan(KneeSearch((parse_slo("ttft_ms:p99<=100"),), **kwargs))
    probed = []
    while (value := plan._next_value()) is not None:
        probed.append(value)
        plan.probes.append({"load": value, "passed": value <= knee, "failing": []})
    return probed


def test_search_doubles_then_bisects_to_the_knee():
    assert _search(12) == [1, 2, 4, 8, 16, 12, 14, 13]
    assert _search(100, max_probes=4) == [1, 2, 4, 8]  # not bracketed: stops at max probes
    assert _search(0) == [1]  # fails at concurrency 1: no knee
    rates = _search(3.3, mode="rate", start=8.0, precision=0.1)
    assert rates[:3] == [8.0, 4.0, 2.0]  # halves until one passes
    low = max(r for r in rates if r <= 3.3)
    high = min(r for r in rates if r > 3.3)
    assert low <= 3.3 < high and (high - low) / low <= 0.1


def test_judge_names_each_missed_condition():
    level = {"load": {"mode": "concurrency", "concurrency": 4},
             "requests": {"completed": 90, "failed": 10, "incomplete": 0},
             "goodput": {"per_slo": [{"slo": "ttft_ms:p99<=100", "met": False, "value": 180.0},
                                     {"slo": "tpot_ms<=50", "pass_rate": 0.95}]},
             "timeline": {"steady": {"steady": False, "reason": "tok/s fell by 40 %"}}}
    misses = judge(level, [parse_slo("ttft_ms:p99<=100"), parse_slo("tpot_ms<=50")])
    assert misses[0] == "ttft_ms:p99<=100: p99 was 180.0"
    assert "95.0% of requests" in misses[1]
    assert "10 of 100 requests failed" in misses[2]
    assert misses[3] == "unsteady: tok/s fell by 40 %"
    level["requests"] = {"completed": 8, "failed": 0, "incomplete": 0}
    level["goodput"]["per_slo"] = [{"slo": "ttft_ms:p99<=100", "met": True, "value": 50.0}]
    level["timeline"] = None
    assert judge(level, [parse_slo("ttft_ms:p99<=100")]) == [
        "only 8 requests: under 4 waves of 4 streams (lengthen --duration)"]


def _profile(knee: float, high: float) -> dict:
    probes = [{"load": knee, "passed": True, "failing": [], "goodput_requests_per_s": 9.5,
               "server": {"kv_peak_percent": 41.0, "waiting_peak": 0, "waiting_growing": False,
                          "preemptions": 0}},
              {"load": high, "passed": False, "failing": ["ttft_ms:p99<=500: p99 was 812.0"],
               "goodput_requests_per_s": 7.25,
               "server": {"kv_peak_percent": 100.0, "waiting_peak": 9, "waiting_growing": True,
                          "preemptions": 3}}]
    return {"name": "slo-search", "mode": "concurrency", "slos": ["ttft_ms:p99<=500"],
            "knee": knee, "bracket": [knee, high], "stopped": "within precision",
            "probes": probes}


def test_knee_text_and_the_ab_sentence():
    text = format_knee(_profile(12, 13))
    assert text.splitlines() == [
        "knee (ttft_ms:p99<=500): concurrency 12; next probe up, concurrency 13, failed "
        "(stopped: within precision)",
        "  probe 1: concurrency 12, goodput 9.50 req/s: pass",
        "  probe 2: concurrency 13, goodput 7.25 req/s: FAIL ttft_ms:p99<=500: p99 was 812.0"]
    summary = {"phases": [{"name": "bf16", "knee": _profile(12, 13), "levels": []},
                          {"name": "qat", "knee": _profile(24, 26), "levels": []}]}
    paragraphs = [b.text for b in knee_section(summary).blocks if isinstance(b, Paragraph)]
    assert paragraphs[0] == "bf16 holds the SLOs up to 12; qat holds the SLOs up to 24."
    assert paragraphs[2] == ("At the knee (12): KV cache peaked at 41 %, queue peaked at 0 "
                             "waiting (not growing), 0 preemptions.")
    assert paragraphs[3] == ("Above it (13): KV cache peaked at 100 %, queue peaked at 9 "
                             "waiting (growing), 3 preemptions.")
