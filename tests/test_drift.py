"""The A-B-A drift check (loadgen.report.drift) on results files with real encoded HDR
histograms: same server → within tolerance; a server 15 % slower per token → drift; too
few requests → inconclusive; token timings below the client's resolution → not judged."""

from __future__ import annotations

import copy

import pytest

from loadgen.report.drift import (
    VERDICT_DRIFT,
    VERDICT_INCONCLUSIVE,
    VERDICT_OK,
    drift_check,
)
from tests.helpers.report_fixtures import make_level

DECODE = 51.3  # tok/s per request, the L4 bf16 figure
SWEEP = {1: 45.6, 4: 171.6, 16: 619.1}


def _phase(seed: int, slowdown: float = 1.0, requests: int = 40, single: bool = True,
           speedup: float = 1.0) -> dict:
    """A phase whose server takes ``slowdown``× as long per token (decode and throughput
    divided by it), with ``requests`` per level and a fresh random draw (``seed``)."""
    factor = speedup / slowdown
    sweep = [make_level(c, tps * factor, DECODE * factor, requests=requests, seed=seed)
             for c, tps in SWEEP.items()]
    measurements = {"sweep": sweep, "single_stream": None, "fixed_length": None}
    if single:
        measurements["single_stream"] = make_level(1, DECODE * 0.9 * factor, DECODE * factor,
                                                   requests=requests, seed=seed + 50)
    return {"measurements": measurements, "levels": sweep}


def test_the_same_server_twice_is_within_tolerance():
    check = drift_check(_phase(0), _phase(2), 0.05, candidate=_phase(1, speedup=2.05),
                        names=("bf16-a", "bf16-b", "qat"))
    assert check["verdict"] == VERDICT_OK and check["ok"] is True
    primary = [row for row in check["metrics"] if row["primary"]]
    assert [row["state"] for row in primary] == ["within", "within"]
    assert all(row["n"] == [160, 160] for row in primary)  # single stream + 3 levels × 40
    moved = check["baseline_moved"]
    assert 0.98 < moved["low"] < moved["high"] < 1.02  # a 1 % per-request spread, 160 requests
    assert check["effect"]["low"] == pytest.approx(2.05, abs=0.03)
    assert check["sentence"].startswith("baseline bf16-a moved ")
    assert "while qat/bf16-a is 2.0" in check["sentence"]
    assert check["sentence"].endswith("the difference is the checkpoint")


def test_a_server_slowed_by_15_percent_is_drift():
    check = drift_check(_phase(0), _phase(2, slowdown=1.15), 0.05)
    assert check["verdict"] == VERDICT_DRIFT and check["ok"] is False
    decode = next(row for row in check["metrics"] if row["metric"] == "decode_tokens_per_s")
    assert decode["state"] == "drift"
    assert decode["ci"]["high"] < 0.95  # 1/1.15 ≈ 0.87, wholly outside ±5 %
    assert "may not be the checkpoint" in check["sentence"]
    # A tolerance wider than the slowdown accepts it.
    assert drift_check(_phase(0), _phase(2, slowdown=1.15), 0.25)["ok"] is True


def test_too_few_requests_are_inconclusive_not_within():
    few = dict(requests=1, single=False)
    check = drift_check(_phase(0, **few), _phase(2, **few), 0.05)
    assert check["verdict"] == VERDICT_INCONCLUSIVE and check["ok"] is None
    decode = check["metrics"][0]
    assert decode["ci"]["low"] is None and decode["n"] == [3, 3]


def test_token_timings_below_resolution_are_excluded_with_the_reason():
    """Tokens arriving several per read (ITL p50 of 0) at concurrency 16 in A₁: that level's
    per-token numbers are not evidence, even when they look far off; e2e-based throughput
    there still counts."""
    a1, a2 = _phase(0), _phase(2)
    bursty = a1["measurements"]["sweep"][2]
    bursty["itl_ms"]["p50"] = 0.0
    distorted = make_level(16, SWEEP[16], DECODE * 1.6, requests=40, seed=9)
    bursty["histograms"]["decode_tokens_per_s"] = distorted["histograms"]["decode_tokens_per_s"]
    check = drift_check(a1, a2, 0.05)
    assert check["verdict"] == VERDICT_OK
    reasons = {(row["level"], row["metric"]): row["reason"] for row in check["excluded"]}
    assert reasons[("concurrency 16", "decode_tokens_per_s")] == \
        "tokens arrived several per socket read (ITL p50 is 0)"
    assert ("concurrency 16", "itl_ms_p50") in reasons
    decode = check["metrics"][0]
    assert "concurrency 16" not in decode["level"] and decode["n"] == [120, 120]
    throughput = next(r for r in check["metrics"] if r["metric"] == "output_tokens_per_s")
    assert throughput["level"] == "all levels"


def test_itl_below_twice_the_clients_timing_resolution_is_not_judged():
    a1, a2 = _phase(0), copy.deepcopy(_phase(2))
    for level in (a1["measurements"]["sweep"][0], a2["measurements"]["sweep"][0]):
        level["client"]["loop_lag_ms"]["p90"] = 15.0  # ITL p50 is ~19.5 ms < 2 × 15
    check = drift_check(a1, a2, 0.05)
    itl = [row for row in check["excluded"] if row["metric"] == "itl_ms_p50"]
    assert [row["level"] for row in itl] == ["concurrency 1"]
    assert "2× the client's timing resolution (15.00 ms" in itl[0]["reason"]


@pytest.mark.integration
def test_a_real_simulator_slowed_by_15_percent_between_a1_and_a2_is_drift(start_sim, tmp_path):
    """Two sweeps through the CLI: A₁ against a simulator at 4 ms per token, A₂ against one
    at 4.6 ms (15 % slower): the check calls it drift on the per-request numbers."""
    import json

    from click.testing import CliRunner

    from loadgen.cli.main import cli
    from loadgen.simulator import SimProfile

    results = []
    for name, itl_s in (("a1", 0.004), ("a2", 0.004 * 1.15)):
        url = start_sim(SimProfile(ttft_s=0.02, itl_s=itl_s, jitter=0.01))
        out = tmp_path / f"{name}.json"
        run = CliRunner().invoke(cli, ["sweep", "--target", url, "--concurrency", "1,4",
                                       "--requests", "12", "--output-tokens", "32",
                                       "--out", str(out), "--quiet"])
        assert run.exit_code == 0, run.output
        results.append(json.loads(out.read_text()))
    check = drift_check(*results, 0.05)
    assert check["verdict"] == VERDICT_DRIFT, check["sentence"]
    throughput = next(r for r in check["metrics"] if r["metric"] == "output_tokens_per_s")
    assert throughput["n"] == [24, 24] and throughput["ci"]["high"] < 0.95


def test_a_client_too_busy_for_its_requests_is_not_evidence():
    """Event-loop lag p90 above 5 % of a request's e2e at every level of A₁: the drift check
    says it cannot judge, instead of calling the client's own delay drift."""
    a1, a2 = _phase(0), _phase(2, slowdown=0.7)  # "faster" A₂: the busy A₁ client's delay
    levels = [a1["measurements"]["single_stream"], *a1["measurements"]["sweep"]]
    for level in levels:
        level["client"]["loop_lag_ms"]["p90"] = level["e2e_ms"]["mean"] * 0.2
        level["itl_ms"]["p50"] = 0.0  # and its tokens came in bunches
    check = drift_check(a1, a2, 0.05)
    assert check["ok"] is None and check["verdict"].startswith("inconclusive: no metric")
    reasons = [row["reason"] for row in check["excluded"]
               if row["metric"] == "output_tokens_per_s"]
    assert len(reasons) == 4 and "the client's event loop lagged" in reasons[0]
