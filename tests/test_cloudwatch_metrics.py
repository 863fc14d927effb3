"""A SageMaker endpoint's own metrics: the deploy's MetricsConfig (what real botocore sends),
and each level's CloudWatch metrics fetched from moto in server mode, where the test has
published known data points for the endpoint (plus decoys the fetch must leave out)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import subprocess
from datetime import datetime, timezone

import boto3
import pytest
from botocore.model import ServiceModel

from loadgen.api import build_config, sweep
from loadgen.aws import AwsConfig, DeploySpec, deploy_endpoint
from loadgen.aws.level_metrics import client_vs_endpoint, wall_window
from loadgen.aws.metrics_config import EndpointMetricsConfig, metrics_config_argument
from loadgen.errors import ConfigError
from loadgen.load import ConstantConcurrency, StopRule
from loadgen.report import build_summary
from loadgen.report.cloudwatch import cloudwatch_lines
from loadgen.report.markdown import render_markdown
from loadgen.runconfig import CloudWatchSettings
from tests.helpers.sagemaker_server import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SageMakerTestServer,
)
from tests.helpers.aws_env import isolate_aws, reset_moto

ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm:0.11-gpu-py312"


def sagemaker_run(runtime_url: str, cloudwatch: CloudWatchSettings, concurrency: int,
                  requests: int, **keywords):
    """``sweep`` of one level on the event-stream test server, reading CloudWatch with
    ``cloudwatch`` (its poll interval is not a run option: set on the RunConfig)."""
    config = build_config("sagemaker://openai", loads=[ConstantConcurrency(concurrency)],
                          stop=StopRule(requests=requests), endpoint_url=runtime_url)
    config = dataclasses.replace(config, cloudwatch=cloudwatch)
    return asyncio.run(sweep(config=config, **keywords))


@pytest.fixture
def aws(moto_url, monkeypatch, tmp_path):
    """Credentials the event-stream test server accepts (moto accepts any), no local config."""
    isolate_aws(monkeypatch, tmp_path, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                region=REGION)
    reset_moto(moto_url)
    return moto_url


# --------------------------------------------------------------------------- deploy


@pytest.mark.integration
def test_deploy_sends_metrics_config_as_botocore_serialises_it(aws, tmp_path):
    """moto 5.2 drops MetricsConfig, so the check is what real botocore puts on the wire."""
    config = AwsConfig(region=REGION, endpoint_url=aws)
    sent: list[dict] = []
    config.sagemaker().meta.events.register(
        "before-send.sagemaker.CreateEndpointConfig",
        lambda request, **_: sent.append(json.loads(request.body)))
    spec = DeploySpec(name="cw-deploy", image=IMAGE, role_arn=ROLE, instance_type="ml.g4dn.xlarge",
                      metrics=EndpointMetricsConfig(frequency_s=30, detailed_observability=True))
    dep = deploy_endpoint(spec, record_path=tmp_path / "d.json", poll_s=0.01, facts_wait_s=0,
                          aws=config)
    assert dep.in_service and len(sent) == 1
    assert sent[0]["MetricsConfig"] == {"EnableEnhancedMetrics": True,
                                        "MetricPublishFrequencyInSeconds": 30,
                                        "EnableDetailedObservability": True}
    assert dep.spec["metrics_config"]["MetricPublishFrequencyInSeconds"] == 30


def test_metrics_config_defaults_and_bad_frequency():
    assert EndpointMetricsConfig().to_api() == {"EnableEnhancedMetrics": True,
                                                "MetricPublishFrequencyInSeconds": 10,
                                                "EnableDetailedObservability": False}
    with pytest.raises(ConfigError, match="--metrics-frequency must be one of 10, 30"):
        EndpointMetricsConfig(frequency_s=15).validate()


def test_an_older_botocore_without_the_shape_deploys_without_it_and_warns_once():
    """A real botocore ServiceModel whose CreateEndpointConfig has no MetricsConfig member."""
    model = ServiceModel({
        "metadata": {"protocol": "json", "apiVersion": "2017-07-24", "endpointPrefix": "api.sagemaker",
                     "jsonVersion": "1.1", "serviceId": "SageMaker", "signatureVersion": "v4",
                     "targetPrefix": "SageMaker"},
        "operations": {"CreateEndpointConfig": {"name": "CreateEndpointConfig",
                                                "http": {"method": "POST", "requestUri": "/"},
                                                "input": {"shape": "In"}}},
        "shapes": {"In": {"type": "structure", "members": {"EndpointConfigName": {"shape": "S"}}},
                   "S": {"type": "string"}}})

    class OldClient:  # only what metrics_config_argument reads: client.meta.service_model
        class meta:
            service_model = model

    warnings: list[str] = []
    assert metrics_config_argument(OldClient, EndpointMetricsConfig(), warnings.append) == {}
    assert len(warnings) == 1 and "no MetricsConfig" in warnings[0]
    current = boto3.session.Session().client("sagemaker", region_name="us-east-1")
    assert "MetricsConfig" in metrics_config_argument(current, EndpointMetricsConfig(),
                                                      warnings.append)
    assert len(warnings) == 1


# --------------------------------------------------------------------------- a level's metrics


def _publish(url: str, endpoint: str, start_s: float) -> None:
    """Known data points in the level's first 10-s period, plus decoys: the same metric an
    hour earlier, and another endpoint at the same time."""
    cw = boto3.session.Session().client("cloudwatch", endpoint_url=url, region_name=REGION)
    at = datetime.fromtimestamp(math.floor(start_s / 10) * 10 + 1, timezone.utc)
    long_ago = datetime.fromtimestamp(start_s - 3600, timezone.utc)

    def put(namespace, name, values, when=at, who=endpoint, unit="None"):
        dims = [{"Name": "EndpointName", "Value": who}, {"Name": "VariantName", "Value": "AllTraffic"}]
        cw.put_metric_data(Namespace=namespace, MetricData=[
            {"MetricName": name, "Dimensions": dims, "Timestamp": when, "Value": v, "Unit": unit}
            for v in values])

    put("AWS/SageMaker", "ModelLatency", [100_000, 300_000], unit="Microseconds")
    put("AWS/SageMaker", "OverheadLatency", [5_000, 7_000], unit="Microseconds")
    put("AWS/SageMaker", "Invocations", [4])
    put("AWS/SageMaker", "Invocation4XXErrors", [0])
    put("AWS/SageMaker", "Invocation5XXErrors", [0])
    put("/aws/sagemaker/Endpoints", "GPUUtilization", [70], unit="Percent")
    put("AWS/SageMaker", "ModelLatency", [9_000_000], when=long_ago, unit="Microseconds")
    put("AWS/SageMaker", "ModelLatency", [8_000_000], who="someone-else", unit="Microseconds")
    # Last: with Invocations, this is what the fetch takes as "arrived" (the fetch polls
    # while these are written).
    put("/aws/sagemaker/Endpoints", "CPUUtilization", [40, 60], unit="Percent")


@pytest.mark.integration
def test_a_level_fetches_exactly_the_published_datapoints(aws, tmp_path):
    out = tmp_path / "run.json"

    def published(level):  # as the level ends: the points are "late" for the first poll
        _publish(aws, "openai", wall_window(level.start_ns, level.end_ns)[0])

    with SageMakerTestServer() as server:
        results = sagemaker_run(server.url, CloudWatchSettings(wait_s=10, endpoint_url=aws,
                                                               poll_s=0.2),
                                2, 4, out=out, on_level=published)
    level = json.loads(out.read_text())["levels"][0]
    assert level["requests"]["completed"] == 4
    cw = level["cloudwatch"]
    assert cw["status"] == "complete" and cw["endpoint"] == "openai" and cw["period_s"] == 10
    # The series sits on the level's timeline, counted from the level's start.
    offset = (cw["t0_ns"] - level["timeline"]["t0_ns"]) / 1e9
    assert level["timeline"]["sources"]["cloudwatch"]["offset_s"] == pytest.approx(offset, abs=1e-6)
    m = cw["metrics"]
    assert m["ModelLatency"]["values"] == [200.0] and m["ModelLatency"]["samples"] == [2]
    assert m["ModelLatency"]["level"] == {"mean_ms": 200.0, "p50_ms": None, "max_ms": 300.0,
                                          "samples": 2}
    assert m["OverheadLatency"]["level"]["mean_ms"] == 6.0
    assert m["Invocations"]["level"] == {"sum": 4.0}
    assert m["Invocation5XXErrors"]["level"] == {"sum": 0.0}
    assert m["CPUUtilization"]["level"] == {"mean": 50.0, "max": 60.0}
    assert m["GPUUtilization"]["level"] == {"mean": 70.0, "max": 70.0}
    assert cw["empty"] == ["ModelSetupTime", "GPUMemoryUtilization", "MemoryUtilization"]
    assert "percentiles_error" in cw  # moto has no percentile statistics
    # The series' one point is the level's first period, at most 10 s before its start.
    assert -10 < m["ModelLatency"]["t_s"][0] <= 0
    share = cw["client_vs_endpoint"]
    assert share["ttft_minus_model_latency_ms"] == pytest.approx(level["ttft_ms"]["mean"] - 200, abs=0.01)
    assert share["model_latency_reading"] in ("first_byte", "whole_stream", "unclear")
    line = cloudwatch_lines([level])[0]
    assert "ModelLatency p50 – ms / mean 200.0 ms" in line and "overhead 6.0 ms" in line
    assert "empty: ModelSetupTime" in line
    assert results.levels[0].requests.completed == 4
    # The report: one row per level in its CloudWatch table.
    report = render_markdown(build_summary([json.loads(out.read_text())]))
    assert "## SageMaker endpoint metrics (CloudWatch)" in report
    table = report.split("## SageMaker endpoint metrics (CloudWatch)")[1]
    row = next(r for r in table.splitlines() if r.startswith("| ") and "| complete |" in r)
    assert "| 200.0 |" in row and "| 6.0 |" in row and "70/70" in row


@pytest.mark.integration
def test_nothing_published_is_incomplete_after_the_wait_and_names_every_empty_metric(aws, tmp_path):
    with SageMakerTestServer() as server:
        results = sagemaker_run(server.url, CloudWatchSettings(wait_s=0.5, endpoint_url=aws,
                                                               poll_s=0.2), 1, 2)
    cw = results.to_dict()["levels"][0]["cloudwatch"]
    assert cw["status"] == "incomplete" and cw["polls"] >= 1 and cw["expected_invocations"] == 2
    assert len(cw["empty"]) == 10 and cw["client_vs_endpoint"] is None


@pytest.mark.integration
def test_a_stop_while_waiting_for_cloudwatch_keeps_what_arrived_and_the_run_complete(aws):
    from loadgen.engine import RunControl

    control = RunControl()

    def stop_soon(level):  # Ctrl-C half a second into the (30 s) wait
        asyncio.get_running_loop().call_later(0.5, control.stop)

    with SageMakerTestServer() as server:
        results = sagemaker_run(server.url, CloudWatchSettings(wait_s=30, endpoint_url=aws,
                                                               poll_s=0.2),
                                1, 2, control=control, on_level=stop_soon)
    cw = results.to_dict()["levels"][0]["cloudwatch"]
    assert cw["status"] == "incomplete" and cw["waited_s"] < 25
    assert not results.partial  # every level was measured: only the wait was cut


def test_client_vs_endpoint_reads_where_model_latency_ends():
    section = {"metrics": {"ModelLatency": {"level": {"mean_ms": 900.0}},
                           "OverheadLatency": {"level": {"mean_ms": 10.0}}}}
    whole = client_vs_endpoint(section, ttft_mean_ms=120.0, e2e_mean_ms=950.0)
    assert whole["model_latency_reading"] == "whole_stream"
    assert whole["outside_model_ms"] == 50.0 and whole["network_and_client_ms"] == 40.0
    assert whole["ttft_minus_model_latency_ms"] == -780.0
    first = client_vs_endpoint(section, ttft_mean_ms=1000.0, e2e_mean_ms=5000.0)
    assert first["model_latency_reading"] == "first_byte" and first["outside_model_ms"] == 100.0
    assert client_vs_endpoint(section, 100.0, 800.0)["model_latency_reading"] == "unclear"


def test_cloudwatch_wait_is_checked():
    with pytest.raises(ConfigError, match="--cloudwatch-wait must be 0 to 3600"):
        CloudWatchSettings(wait_s=float("nan"))


@pytest.mark.integration
def test_cli_sweep_prints_a_cloudwatch_line_per_level(aws, tmp_path):
    """`loadgen sweep` as a user runs it; the data points cover the next minutes (the
    levels' windows are not known in advance): ModelLatency 250 ms, CPU 35 %."""
    from tests.test_sagemaker_cli import LOADGEN, aws_env
    from tests.test_scenario_deploy import publish_endpoint_metrics

    publish_endpoint_metrics(aws, "openai", seconds=60)
    with SageMakerTestServer() as server:
        done = subprocess.run(
            [*LOADGEN, "sweep", "--target", "sagemaker://openai", "--endpoint-url", server.url,
             "--concurrency", "1,2", "--requests", "2", "--output-tokens", "4",
             "--cloudwatch-wait", "5", "--cloudwatch-endpoint-url", aws,
             "--out", str(tmp_path / "r.json")],
            env=aws_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "CloudWatch:" in line]
    assert len(lines) == 2, done.stdout
    assert all("mean 250.0 ms" in line and "empty: " in line for line in lines)
    assert "waiting up to 5 s after each level" in done.stderr
    levels = json.loads((tmp_path / "r.json").read_text())["levels"]
    assert [lv["cloudwatch"]["status"] for lv in levels] == ["complete", "complete"]


def test_the_cloudwatch_options_are_run_options_with_one_default():
    """Declared once (CloudWatchSettings' fields): the CLI, MCP, scenarios and the API
    take them by the same names, with the same defaults."""
    from loadgen.runconfig import build_run, option_defaults

    defaults = option_defaults()
    assert defaults["cloudwatch_wait_s"] == 90.0 and defaults["cloudwatch_endpoint_url"] is None
    config = build_run({"target": "sagemaker://x", "cloudwatch_wait_s": 5,
                        "cloudwatch_endpoint_url": "http://127.0.0.1:9"})
    assert config.cloudwatch.wait_s == 5.0 and config.cloudwatch.endpoint_url == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="cloudwatch"):
        build_run({"cloudwatch_wait_s": 4000})
