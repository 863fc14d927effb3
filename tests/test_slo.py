"""SLOs and goodput: parsing, per-request verdicts and level arithmetic by hand, CLI, compare."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.errors import ConfigError
from loadgen.metrics import LevelMetrics
from loadgen.record import RequestRecord
from loadgen.slo import SLO, SLOCounts, is_good, parse_slo

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

MS = 1_000_000


def rec(ttft_ms, e2e_ms, tokens, error=None):
    """A request sent at 0 with its first token at ``ttft_ms`` and its end at ``e2e_ms``."""
    content = [] if ttft_ms is None else [ttft_ms * MS, e2e_ms * MS]
    r = RequestRecord(intended_ns=0, start_ns=0, end_ns=e2e_ms * MS, content_ns=content,
                      output_tokens=tokens)
    if error:
        r.error_type = error
    return r


@pytest.mark.parametrize("text, slo", [
    ("ttft_ms<=500", SLO("ttft_ms", 500.0)),
    ("ttft_ms:p99<=500", SLO("ttft_ms", 500.0, 99.0)),
    (" tpot_ms <= 50.5 ", SLO("tpot_ms", 50.5)),
    ("itl_ms:p99.9<=80", SLO("itl_ms", 80.0, 99.9)),
    ("decode_tokens_per_s>=20", SLO("decode_tokens_per_s", 20.0)),
])
def test_parse(text, slo):
    assert parse_slo(text) == slo
    assert parse_slo(slo.text) == slo  # the text written to results reads back


@pytest.mark.parametrize("text, message", [
    ("ttft<=500", "unknown metric"),
    ("ttft_ms>=500", "a latency: use <="),
    ("decode_tokens_per_s<=5", "a rate: use >="),
    ("itl_ms<=50", "give a percentile"),
    ("ttft_ms:p0<=5", "percentile"),
    ("ttft_ms=500", "METRIC<=VALUE"),
    ("ttft_ms<=5e", "not a number"),
])
def test_parse_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_slo(text)


def test_goodput_arithmetic_by_hand():
    slos = (parse_slo("ttft_ms<=300"), parse_slo("tpot_ms<=50"), parse_slo("e2e_ms:p50<=1000"))
    records = [
        rec(100, 1000, 21),   # tpot (1000-100)/20 = 45: good
        rec(200, 2200, 21),   # tpot 100: fails tpot
        rec(400, 900, 11),    # ttft 400: fails ttft (tpot 50 passes: <=)
        rec(250, 250, 1),     # one token: no tpot, passes it (as vLLM); good
        rec(None, 50, 0),     # completed with no content: no TTFT, fails ttft
        rec(100, 500, 10, error="http_500"),  # failed: never good, not evaluated
    ]
    counts, metrics = SLOCounts(slos), LevelMetrics()
    for r in records:
        counts.add(r)
        metrics.add(r)
    assert [is_good(r, slos) for r in records] == [True, False, False, True, False, False]
    out = counts.to_dict(window_s=2.0, hists=metrics.hists, sent=6)
    assert out["good_requests"] == 2 and out["evaluated_requests"] == 5
    assert out["requests_per_s"] == 1.0  # 2 good / 2 s
    assert out["good_output_tokens"] == 22 and out["output_tokens_per_s"] == 11.0
    assert out["good_fraction"] == round(2 / 6, 4)
    ttft, tpot, e2e = out["per_slo"]
    assert (ttft["passed"], ttft["pass_rate"]) == (3, 0.6)
    assert (tpot["passed"], tpot["pass_rate"]) == (4, 0.8)
    # The percentile SLO judges the level: median e2e of the 5 completed is 900 ms.
    assert e2e["kind"] == "percentile" and abs(e2e["value"] - 900) < 1 and e2e["met"] is True
    assert e2e["passed"] == 4  # requests within 1000 ms (shown, not used for goodput)
    assert out["percentile_slos_met"] is True
    assert out["slos"] == ["ttft_ms<=300", "tpot_ms<=50", "e2e_ms:p50<=1000"]


def test_percentile_slo_missed_and_merge():
    slos = (parse_slo("ttft_ms:p90<=150"), parse_slo("itl_ms:p50<=10"))
    a, b, metrics = SLOCounts(slos), SLOCounts(slos), LevelMetrics()
    for i, r in enumerate(rec(t, t + 100, 2) for t in (100, 120, 140, 160, 200)):
        (a if i % 2 else b).add(r)
        metrics.add(r)
    a.merge(b)
    out = a.to_dict(1.0, metrics.hists, sent=5)
    ttft, itl = out["per_slo"]
    assert ttft["met"] is False and abs(ttft["value"] - 200) < 1 and ttft["passed"] == 3
    assert itl["met"] is False and itl["passed"] is None and itl["pass_rate"] is None
    assert out["good_requests"] == 5  # no per-request SLO: every completed request is good
    assert out["percentile_slos_met"] is False


def test_rate_slo_is_at_least():
    slo = parse_slo("decode_tokens_per_s>=20")
    assert is_good(rec(100, 1100, 21), [slo])  # 20 tokens over 1 s
    assert not is_good(rec(100, 1100, 11), [slo])  # 10 tok/s


def test_cli_shows_goodput_and_compare_compares_it(tmp_path, sim_url):
    outs = []
    for name, ttft in (("a", "10000"), ("b", "0.001")):
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(cli, [
            "sweep", "--target", sim_url, "--concurrency", "1,2", "--requests", "8",
            "--output-tokens", "4", "--out", str(out), "--slo", f"ttft_ms<={ttft}",
            "--slo", "e2e_ms:p99<=0.001"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outs.append(out)
        assert "good req/s" in result.output and "MISSED" in result.output
    a, b = (orjson.loads(p.read_bytes()) for p in outs)
    for level in a["levels"]:
        goodput = level["goodput"]
        assert goodput["good_requests"] == level["requests"]["completed"] == 8
        assert goodput["requests_per_s"] == level["requests_per_s"]  # all 8 good
        assert goodput["per_slo"][1]["met"] is False
    assert all(level["goodput"]["good_requests"] == 0 for level in b["levels"])
    assert a["workload"]["slos"] == ["ttft_ms<=10000", "e2e_ms:p99<=0.001"]
    compared = CliRunner().invoke(cli, ["compare", str(outs[0]), str(outs[1])],
                                  catch_exceptions=False)
    assert compared.exit_code == 0, compared.output
    assert "goodput req/s" in compared.output and "0.00×" in compared.output
    reported = CliRunner().invoke(cli, ["report", str(tmp_path), "--format", "md"],
                                  catch_exceptions=False)
    assert reported.exit_code == 0, reported.output
    markdown = (tmp_path / "report.md").read_text()
    assert "Goodput and SLOs" in markdown and "ttft\\_ms\\<=10000: 100.0%" in markdown


def test_cli_bad_slo_is_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["run", "--slo", "ttft<=5", "--out",
                                      str(tmp_path / "r.json")], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.output.strip().startswith("Error: --slo 'ttft<=5': unknown metric")
    assert len(result.output.strip().splitlines()) == 1
