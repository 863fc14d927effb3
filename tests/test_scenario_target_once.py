"""A scenario phase opens its target once: one preflight, however many measurements and
levels it runs (issue 13).

Counted where the requests arrive: the simulator counts its ``GET /v1/models`` (the HTTP
target's preflight); the SageMaker test server records every invocation, the preflight
being the one-token "Hi".
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from loadgen.fidelity_sim import make_simulated_responder
from loadgen.scenario import RunOptions, load_scenario, run_scenario
from loadgen.simulator import SimProfile
from loadgen.simulator.sagemaker_server import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SageMakerTestServer,
    ServerConfig,
)
from tests.helpers.aws_env import isolate_aws

pytestmark = pytest.mark.integration  # starts servers and worker processes

FAST = SimProfile(ttft_s=0.001, itl_s=0.0)
# Four measurements, five levels, 40 fidelity questions: 49 requests besides the preflight.
MEASUREMENTS = """\
    single_stream: {requests: 2, output_tokens: 8, warmup: 1}
    fixed_length: {output_tokens: 8, repeats: 2}
    sweep: {concurrency: [1, 2], requests: 2, output_tokens: 8}
    fidelity: {enabled: true, max_tokens: 16}
"""


def write_scenario(tmp_path: Path, target: str, measurements: str = MEASUREMENTS) -> Path:
    path = tmp_path / "once.yaml"
    path.write_text(textwrap.dedent("""\
        name: once
        hardware: {instance_type: test-box, price_per_hour: 1.0}
        request: {input_tokens: 8}
        measurements:
        %s
        phases:
          - {label: a, checkpoint: a, target: %s}
        """) % (textwrap.indent(textwrap.dedent(measurements), "  "), target))
    return path


def run_phase(path: Path, out: Path) -> dict:
    result = asyncio.run(run_scenario(load_scenario(path, environ={}), RunOptions(out),
                                      log=lambda message: None))
    assert [(o.label, o.status) for o in result.outcomes] == [("a", "complete")], result.outcomes
    return json.loads((out / "phase-a.json").read_text())


def test_an_http_phase_sends_one_preflight_for_all_its_measurements(start_sim, tmp_path):
    url = start_sim(FAST, responder=make_simulated_responder(0, wrong_rate=0.0))
    data = run_phase(write_scenario(tmp_path, url), tmp_path / "out")

    stats = start_sim.threads[0].simulator.statistics()
    assert stats["reads"]["/v1/models"] == 1
    assert stats["requests_received"] == 1 + 2 + 2 + 2 + 2 + 40  # warm-up, levels, fidelity
    measurements = data["measurements"]
    assert measurements["single_stream"]["requests"]["completed"] == 2
    assert len(measurements["fixed_length"]["e2e_s"]) == 2
    assert [lv["requests"]["completed"] for lv in data["levels"]] == [2, 2]
    assert data["server"]["source"] == "metrics" and data["server"]["kv_cache_tokens"] > 0
    # The fidelity suite ran on the same connections with its own options (greedy, text kept).
    assert data["fidelity"]["score"] == 40


def test_a_sagemaker_phase_sends_one_preflight(monkeypatch, tmp_path):
    isolate_aws(monkeypatch, tmp_path, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                region=REGION)
    with SageMakerTestServer(ServerConfig(seed=5)) as runtime:
        target = (f"{{url: 'sagemaker://openai', region: {REGION}, "
                  f"endpoint_url: '{runtime.url}', payload_format: openai}}")
        data = run_phase(write_scenario(tmp_path, target), tmp_path / "out")
        requests = list(runtime.requests)

    preflights = [r for r in requests if r["body"].get("max_tokens") == 1]
    assert len(preflights) == 1 and requests[0] is preflights[0]
    assert len(requests) == 1 + 1 + 2 + 2 + 2 + 2 + 40
    assert data["target"]["endpoint"] == "openai"
    assert data["fidelity"]["total"] == 40 and data["fidelity"]["errors"] == 0
    assert [lv["requests"]["completed"] for lv in data["measurements"]["sweep"]] == [2, 2]


def test_sweep_workers_open_their_own_targets_next_to_the_phase_one(start_sim, tmp_path):
    url = start_sim(FAST)
    sweep_only = """\
        single_stream: {enabled: false}
        fixed_length: {enabled: false}
        sweep: {concurrency: [2], requests: 4, output_tokens: 8, workers: 2}
        fidelity: {enabled: false}
    """
    data = run_phase(write_scenario(tmp_path, url, sweep_only), tmp_path / "out")

    assert start_sim.threads[0].simulator.statistics()["reads"]["/v1/models"] == 1 + 2
    level = data["levels"][0]
    assert level["requests"]["completed"] == 4 and len(level["workers"]) == 2
