"""Defaults that don't mislead: 4 waves of a level's concurrency, and a warning below that."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule, waves_warning

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def test_default_requests_are_four_waves_at_least_twenty():
    auto = StopRule()
    assert auto.requests_for(ConstantConcurrency(16)) == 64
    assert auto.requests_for(ConstantConcurrency(2)) == 20
    assert auto.requests_for(ArrivalRate(5.0, max_in_flight=10)) == 40
    assert auto.requests_for(ArrivalRate(5.0)) == 20
    assert StopRule(requests=7).requests_for(ConstantConcurrency(16)) == 7
    assert StopRule(duration_s=3).requests_for(ConstantConcurrency(16)) is None


def test_warning_below_four_waves():
    warning = waves_warning(ConstantConcurrency(16), 20)
    assert "20 requests is under 4 waves of 16 streams" in warning and "--requests 64" in warning
    assert waves_warning(ConstantConcurrency(16), 64) is None
    assert waves_warning(ConstantConcurrency(1), 1) is None  # one stream has no tail
    assert waves_warning(ArrivalRate(5.0), 3) is None  # no stream count to judge by


def test_cli_runs_four_waves_and_warns_when_told_fewer(tmp_path, sim_url):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["run", "--target", sim_url, "--concurrency", "8",
                                      "--output-tokens", "2", "--out", str(out), "--quiet"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert orjson.loads(out.read_bytes())["levels"][0]["requests"]["completed"] == 32
    assert "waves of" not in result.output
    result = CliRunner().invoke(cli, ["sweep", "--target", sim_url, "--concurrency", "1,4",
                                      "--requests", "8", "--output-tokens", "2",
                                      "--out", str(out), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "waves of" in line]
    assert warnings == ["warning: concurrency 4: 8 requests is under 4 waves of 4 streams; "
                        "throughput will be under-reported (use --requests 16 or more, "
                        "or --duration)"]
