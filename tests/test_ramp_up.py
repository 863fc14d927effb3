"""--ramp-up end to end through the CLI and the real simulator: requests that started
during the ramp are excluded (by start time) from the level's metrics. The ramp's schedule
(streams spread, rates ramping linearly, exact exclusions) is in test_scheduling.py."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


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
