"""--profile saturation: bounds from one stream and an unthrottled level, then rates between."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.saturation import saturation_rates

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def test_rates_are_evenly_spaced_strictly_between_the_bounds():
    assert saturation_rates(2.0, 10.0, 3) == [4.0, 6.0, 8.0]
    assert saturation_rates(5.0, 5.0, 1) == [6.25]  # no headroom measured: around the rate


def test_cli_saturation_profile(tmp_path, sim_url):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, [
        "sweep", "--target", sim_url, "--profile", "saturation", "--profile-rates", "3",
        "--saturation-concurrency", "8", "--requests", "16", "--output-tokens", "4",
        "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    levels = orjson.loads(out.read_bytes())["levels"]
    assert [lv["load"]["mode"] for lv in levels] == ["concurrency"] * 2 + ["rate"] * 3
    assert [lv["load"]["concurrency"] for lv in levels[:2]] == [1, 8]
    low = levels[0]["requests"]["completed"] / levels[0]["duration_s"]
    high = levels[1]["requests"]["completed"] / levels[1]["duration_s"]
    rates = [lv["load"]["rate"] for lv in levels[2:]]
    assert rates == pytest.approx(saturation_rates(low, high, 3), rel=1e-3)
    # The unthrottled probe is not capped by --requests: it runs 4 waves of its 8 streams.
    assert [lv["requests"]["completed"] for lv in levels] == [16, 32, 16, 16, 16]


def test_cli_saturation_conflicts(tmp_path):
    for args, message in ((["sweep", "--profile", "saturation", "--concurrency", "4"],
                           "chooses its own levels"),
                          (["run", "--profile", "saturation"], "No such option '--profile'")):
        result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "r.json")])
        assert result.exit_code == 2 and message in result.output
