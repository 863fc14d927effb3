"""Phases with a ``deploy`` block: deploy -> measure -> teardown, also when the phase fails.

Real parts: the SageMaker control plane is moto in server mode; the endpoint's vLLM
startup log is written into moto's CloudWatch Logs; the runtime is the repository's
SageMaker test server (real event-stream frames, SigV4 checked), whose endpoint name
picks its behaviour: ``openai`` serves, ``missing`` answers 400 ValidationError.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pytest

from loadgen.engine import RunControl
from loadgen.scenario import RunOptions, load_scenario, run_scenario
from loadgen.simulator.sagemaker_server import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SageMakerTestServer,
    ServerConfig,
)
from tests.helpers.aws_env import isolate_aws, reset_moto, write_endpoint_log

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
HF_SECRET = "hf_scenario_test_secret_71c2"


@pytest.fixture
def aws(moto_url, monkeypatch, tmp_path):
    """Credentials the runtime test server accepts (moto takes any); no local AWS config."""
    isolate_aws(monkeypatch, tmp_path, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    reset_moto(moto_url)
    return moto_url


def scenario_file(tmp_path: Path, moto_url: str, runtime_url: str) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: deploy-test
        hardware: {{instance_type: ml.g4dn.xlarge, region: {REGION}, price_per_hour: 0.7364}}
        request: {{cloudwatch_wait_s: 3}}
        measurements:
          single_stream: {{requests: 2, output_tokens: 8, warmup: 0}}
          fixed_length: {{enabled: false}}
          sweep: {{concurrency: [1, 2], requests: 2, output_tokens: 8}}
          fidelity: {{enabled: false}}
        phases:
          - label: bf16-a
            checkpoint: bf16
            model: google/gemma-4-E2B-it
            deploy: &deploy
              name: openai
              image: 763104351884.dkr.ecr.{REGION}.amazonaws.com/vllm:0.10-gpu
              role: arn:aws:iam::123456789012:role/SageMakerExecution
              endpoint_url: {moto_url}
              runtime_endpoint_url: {runtime_url}
              payload_format: openai
              env: {{SM_VLLM_MAX_MODEL_LEN: 4096}}
          - label: qat
            checkpoint: qat
            model: google/gemma-4-E2B-it-qat-w4a16-ct
            deploy: {{<<: *deploy, name: missing}}
          - label: bf16-b
            checkpoint: bf16
            model: google/gemma-4-E2B-it
            deploy: *deploy
        """))
    return path


def publish_endpoint_metrics(url: str, endpoint: str, seconds: int = 180) -> None:
    """What SageMaker would publish for the endpoint: a point every 10 s from 20 s ago to
    ``seconds`` ahead (the levels' windows are not known in advance): ModelLatency 250 ms,
    100 invocations and CPU 35 % per period."""
    cw = boto3.client("cloudwatch", endpoint_url=url, region_name=REGION)
    dims = [{"Name": "EndpointName", "Value": endpoint}, {"Name": "VariantName", "Value": "AllTraffic"}]
    now = int(time.time()) // 10 * 10
    for t in range(now - 20, now + seconds, 10):
        when = datetime.fromtimestamp(t + 1, timezone.utc)
        for namespace, name, value in (("AWS/SageMaker", "ModelLatency", 250_000),
                                       ("AWS/SageMaker", "Invocations", 100),
                                       ("/aws/sagemaker/Endpoints", "CPUUtilization", 35)):
            cw.put_metric_data(Namespace=namespace, MetricData=[
                {"MetricName": name, "Dimensions": dims, "Timestamp": when, "Value": value}])


def test_each_phase_deploys_measures_and_tears_down_even_when_it_fails(aws, tmp_path):
    publish_endpoint_metrics(aws, "openai")
    startup_log = (LOGS / "vllm-0.10.2.log").read_text(encoding="utf-8").splitlines()
    for endpoint in ("openai", "missing"):  # what the container would have logged
        write_endpoint_log(aws, REGION, endpoint, startup_log)
    out = tmp_path / "out"
    messages: list[str] = []
    with SageMakerTestServer(ServerConfig(seed=3)) as runtime:
        scenario = load_scenario(scenario_file(tmp_path, aws, runtime.url), environ={})
        result = asyncio.run(run_scenario(scenario, RunOptions(out), log=messages.append))

    assert [(o.label, o.status) for o in result.outcomes] == [
        ("bf16-a", "complete"), ("qat", "failed"), ("bf16-b", "complete")]
    assert "missing" in result.outcomes[1].error

    expected = json.loads((LOGS / "expected.json").read_text())["vllm-0.10.2.log"]
    for label in ("bf16-a", "qat", "bf16-b"):
        data = json.loads((out / f"phase-{label}.json").read_text())
        server = data["server"]
        assert server["kv_cache_tokens"] == expected["kv_cache_tokens"]  # from CloudWatch
        assert server["weights_load_s"] == expected["weights_load_s"]
        assert isinstance(server["time_to_in_service_s"], float)
        assert data["deployment"]["status"] == "Deleted"
        assert any(item.startswith("endpoint ") for item in data["teardown"]["deleted"])
        record = json.loads((out / "deployments" / f"phase-{label}.deployment.json").read_text())
        assert record["status"] == "Deleted"
        assert record["spec"]["environment"]["HF_TOKEN"] == "***"
    measured = json.loads((out / "phase-bf16-a.json").read_text())
    assert measured["target"]["endpoint"] == "openai"
    assert [lv["requests"]["completed"] for lv in measured["measurements"]["sweep"]] == [2, 2]
    # Each level's endpoint metrics, read from CloudWatch after the phase (file rewritten);
    # the deploy asked for enhanced metrics every 10 s.
    for level in [*measured["measurements"]["sweep"], measured["measurements"]["single_stream"]]:
        cw = level["cloudwatch"]
        assert cw["status"] == "complete" and cw["endpoint"] == "openai"
        assert cw["metrics"]["ModelLatency"]["level"]["mean_ms"] == 250.0
        assert cw["metrics"]["CPUUtilization"]["level"]["mean"] == 35.0
        assert "GPUUtilization" in cw["empty"]
    assert measured["deployment"]["spec"]["metrics_config"] == {
        "EnableEnhancedMetrics": True, "MetricPublishFrequencyInSeconds": 10,
        "EnableDetailedObservability": False}
    assert any("CloudWatch metrics: complete" in m for m in messages)

    # Nothing is left billing, and the token never reached a file.
    sagemaker = boto3.client("sagemaker", endpoint_url=aws, region_name=REGION)
    assert sagemaker.list_endpoints()["Endpoints"] == []
    assert sagemaker.list_models()["Models"] == []
    assert sagemaker.list_endpoint_configs()["EndpointConfigs"] == []
    for path in out.rglob("*"):
        if path.is_file():
            assert HF_SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    assert any("deleting endpoint openai" in m for m in messages)


def test_a_stopped_run_tears_down_the_live_endpoint_and_goes_no_further(aws, tmp_path):
    write_endpoint_log(aws, REGION, "openai",
                       (LOGS / "vllm-0.10.2.log").read_text(encoding="utf-8").splitlines())
    control = RunControl()

    def log(message: str) -> None:
        if "InService after" in message:
            control.stop()  # Ctrl-C while the endpoint is up (and billing)

    with SageMakerTestServer(ServerConfig(seed=4)) as runtime:
        scenario = load_scenario(scenario_file(tmp_path, aws, runtime.url), environ={})
        result = asyncio.run(run_scenario(scenario, RunOptions(tmp_path / "out"),
                                          control=control, log=log))
    assert result.interrupted
    assert [(o.label, o.status) for o in result.outcomes] == [("bf16-a", "interrupted")]
    data = json.loads((tmp_path / "out" / "phase-bf16-a.json").read_text())
    assert data["deployment"]["status"] == "Deleted" and data["phase"]["status"] == "interrupted"
    sagemaker = boto3.client("sagemaker", endpoint_url=aws, region_name=REGION)
    assert sagemaker.list_endpoints()["Endpoints"] == []
