"""--ramp-up: streams start spread over the ramp, rates ramp linearly, and requests that
started during the ramp are excluded (by start time) from the level's metrics."""

from __future__ import annotations

import asyncio
import itertools
import math

import orjson
import pytest
from click.testing import CliRunner

import loadgen
from loadgen.cli.main import cli
from loadgen.load import ArrivalRate, ramped

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def test_ramped_offsets_follow_a_linear_rate():
    steady = ArrivalRate(10.0).offsets_ns()  # every 100 ms
    offsets = list(itertools.islice(ramped(steady, 2_000_000_000), 20))
    # During the 2 s ramp the rate rises 0 -> 10/s: 10 arrivals (10 * 2 / 2) in the ramp.
    assert offsets[:3] == [0, round(math.sqrt(2 * 2e9 * 1e8)), round(math.sqrt(2 * 2e9 * 2e8))]
    assert sum(o < 2_000_000_000 for o in offsets) == 10
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert gaps[:9] == sorted(gaps[:9], reverse=True)  # ever denser during the ramp
    assert all(g == 100_000_000 for g in gaps[10:])  # then the steady 10/s
    assert list(itertools.islice(ramped(ArrivalRate(10.0).offsets_ns(), 0), 3)) == [
        0, 100_000_000, 200_000_000]


def test_closed_loop_ramp_excludes_requests_started_during_it(sim_url):
    result = asyncio.run(loadgen.sweep(
        sim_url, loads=[loadgen.ConstantConcurrency(4)],
        stop=loadgen.StopRule(requests=12, ramp_up_s=0.3), keep_records=True,
        prompts=loadgen.PromptSource(16, 8), server_metrics_interval_s=None))
    [level] = result.levels
    starts = sorted(r.start_ns for r in level.records)
    data = result.to_dict()["levels"][0]
    # Measured: 12 requests, all started after the ramp; the ramp's own are on top.
    assert data["requests"]["completed"] == 12 == len(level.records)
    assert data["ramp_up"]["seconds"] == 0.3 and data["ramp_up"]["excluded_requests"] >= 3
    first_measured = starts[0]
    assert all(s >= first_measured for s in starts)
    assert data["duration_s"] < (max(r.end_ns for r in level.records) - first_measured) / 1e9 + 0.3


def test_cli_ramp_up_for_a_rate_level(tmp_path, sim_url):
    out, saved = tmp_path / "r.json", tmp_path / "req.jsonl"
    result = CliRunner().invoke(cli, [
        "run", "--target", sim_url, "--rate", "20", "--ramp-up", "0.5", "--requests", "10",
        "--output-tokens", "4", "--out", str(out), "--quiet", "--save-requests", str(saved)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    level = orjson.loads(out.read_bytes())["levels"][0]
    lines = [orjson.loads(line) for line in saved.read_text().splitlines()]
    # 20/s ramping over 0.5 s: 5 arrivals in the ramp, excluded; then 10 measured.
    assert level["ramp_up"] == {"seconds": 0.5, "excluded_requests": 5}
    assert level["requests"]["completed"] == len(lines) == 10
    intended = sorted(line["intended_ns"] for line in lines)
    assert [b - a for a, b in zip(intended, intended[1:])] == [50_000_000] * 9
