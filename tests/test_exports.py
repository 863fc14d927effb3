"""--save-requests (JSONL per request, written as requests finish) and --hdr-log (interval
histograms in the HdrHistogram log format, read back with hdrh's reader)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

import loadgen
from loadgen.metrics import ALL_METRICS, new_histogram
from loadgen.simulator import SimProfile
from loadgen.slo import parse_slo

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def sweep(url, concurrencies, requests, measurement, **kw):
    return asyncio.run(loadgen.sweep(
        url, loads=[loadgen.ConstantConcurrency(c) for c in concurrencies],
        stop=loadgen.StopRule(requests=requests), prompts=loadgen.PromptSource(16, 6),
        measurement=measurement, server_metrics_interval_s=None, **kw))


def test_save_requests_streams_one_line_per_request(tmp_path, start_sim):
    url = start_sim(SimProfile(ttft_s=0.005, itl_s=0.001, fault_500=0.3, seed=4))
    path = tmp_path / "requests.jsonl"
    seen_after_first_level = []

    def on_level(level):  # written as the run goes, not at its end
        seen_after_first_level.append(len(path.read_text().splitlines()))

    measurement = loadgen.Measurement(save_requests=str(path),
                                        slos=(parse_slo("ttft_ms<=60000"),))
    result = sweep(url, (1, 2), 10, measurement, on_level=on_level)
    lines = [orjson.loads(line) for line in path.read_text().splitlines()]
    assert seen_after_first_level[0] == 10 and len(lines) == 20
    assert [line["level"] for line in lines] == [1] * 10 + [2] * 10
    assert {line["load"] for line in lines} == {"concurrency 1", "concurrency 2"}
    assert len({line["request_id"] for line in lines}) == 20
    failed = [line for line in lines if line["error_type"]]
    levels = result.to_dict()["levels"]
    assert len(failed) == sum(lv["requests"]["failed"] for lv in levels) > 0
    assert all(line["error_type"] == "http_500" and line["error_message"] and
               line["good"] is False and line["error"] == "http_500"
               and line["ttft_ms"] is None and line["e2e_ms"] is None for line in failed)
    for line in lines:
        if line["error_type"] is None:
            assert line["good"] is True and line["output_tokens"] == 6
            assert len(line["content_ns"]) >= 1
            assert line["intended_ns"] <= line["start_ns"] <= line["content_ns"][0] \
                <= line["end_ns"]
            # The derived metrics sit next to the raw timestamps, by the same formulas
            # (µs resolution, as the histograms record them).
            ttft = (line["content_ns"][0] - line["intended_ns"]) // 1000 / 1000
            e2e = (line["end_ns"] - line["intended_ns"]) // 1000 / 1000
            assert line["ttft_ms"] == pytest.approx(ttft) and line["e2e_ms"] == pytest.approx(e2e)
            gaps = [b - a for a, b in zip(line["content_ns"], line["content_ns"][1:])]
            if gaps:
                assert line["itl_max_ms"] == max(gaps) / 1e6
                assert line["itl_mean_ms"] == pytest.approx(sum(gaps) / len(gaps) / 1e6)
            assert line["error"] is None
        assert "text" not in line


def read_intervals(path):
    reader = HistogramLogReader(str(path), new_histogram("ttft_ms"))
    intervals = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        intervals.append(hist)
    reader.close()
    return reader, intervals


def test_hdr_log_intervals_read_back_with_hdrh(tmp_path, start_sim):
    url = start_sim(SimProfile(ttft_s=0.02, itl_s=0.005))
    directory = tmp_path / "hdr"
    measurement = loadgen.Measurement(hdr_log=str(directory), hdr_interval_s=0.1)
    result = sweep(url, (2, 4), 24, measurement).to_dict()
    files = sorted(p.name for p in directory.iterdir())
    assert files == sorted([f"01-concurrency-2.{m}.hlog" for m in ALL_METRICS]
                           + [f"02-concurrency-4.{m}.hlog" for m in ALL_METRICS])
    for index, level in ((1, result["levels"][0]), (2, result["levels"][1])):
        label = f"0{index}-concurrency-{level['load']['concurrency']}"
        reader, intervals = read_intervals(directory / f"{label}.ttft_ms.hlog")
        assert len(intervals) >= 2  # the level lasted longer than one 0.1 s interval
        total = HdrHistogram(1, 3_600_000_000, 3)
        for hist in intervals:
            total.add(hist)
        # Every completed request is in exactly one interval; the sum is the level's histogram.
        assert total.get_total_count() == level["requests"]["completed"] == 24
        level_hist = HdrHistogram.decode(level["histograms"]["ttft_ms"])
        assert total.get_value_at_percentile(99) == level_hist.get_value_at_percentile(99)
        starts = [h.get_start_time_stamp() for h in intervals]
        assert starts == sorted(starts) and reader.get_start_time_sec() > 1e9  # epoch seconds
        text = (directory / f"{label}.ttft_ms.hlog").read_text()
        assert "#[Histogram log format version 1.2]" in text and '"StartTimestamp"' in text
