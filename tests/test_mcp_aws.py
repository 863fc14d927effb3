"""``loadgen mcp``'s endpoint tools against moto in server mode: deploy, status, list and
delete with ``--allow-deploy``; refused without it; no credential in any output."""

from __future__ import annotations

import json
import textwrap

import boto3
import pytest

from loadgen.mcp.options import ServerOptions
from tests.helpers.aws_env import isolate_aws, reset_moto
from tests.helpers.mcp_session import call, call_error, session

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11-gpu-py312"
HF_SECRET = "hf_not_a_real_token_5a6b7c8d"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYNOTAREALKEY"
QUICK = {"poll_interval_s": 0.01, "facts_wait_s": 0, "instance_type": "ml.g4dn.xlarge"}


@pytest.fixture
def moto(moto_url, monkeypatch, tmp_path):
    isolate_aws(monkeypatch, tmp_path, region=REGION, secret_key=AWS_SECRET)
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    reset_moto(moto_url)
    return moto_url


def server_options(tmp_path, moto_url, allow_deploy=True) -> ServerOptions:
    return ServerOptions(workdir=tmp_path / "work", allow_deploy=allow_deploy,
                         allow_read=(tmp_path,),
                         region=REGION, aws_endpoint_url=moto_url)


def test_deploy_status_list_delete_with_allow_deploy(moto, tmp_path):
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message)

    async def body(client):
        result = await client.call_tool("deploy_endpoint", {
            "name": "gemma-qat", "image": IMAGE, "role": ROLE,
            "model_id": "google/gemma-4-E2B-it-qat-w4a16-ct",
            "env": ["SM_VLLM_MAX_MODEL_LEN=4096"], "tags": {"team": "ml"}, **QUICK},
            progress_callback=on_progress)
        assert not result.is_error, result.content[0].text
        everything = [result.model_dump_json()]
        status = await call(client, "endpoint_status", name="gemma-qat")
        listed = await call(client, "list_endpoints")
        deleted = await call(client, "delete_endpoint", name="gemma-qat", poll_interval_s=0.01)
        again = await call(client, "delete_endpoint", name="gemma-qat", poll_interval_s=0.01)
        after = await call(client, "list_endpoints", include_orphans=True)
        for output in (status, listed, deleted, again, after):
            everything.append(json.dumps(output))
        return result.structured_content, status, listed, deleted, again, after, everything

    deployed, status, listed, deleted, again, after, everything = session(
        server_options(tmp_path, moto), body)
    assert deployed["status"] == "InService" and deployed["target"] == "sagemaker://gemma-qat"
    assert deployed["seconds_to_in_service"] is not None
    assert deployed["deployment"]["spec"]["environment"]["HF_TOKEN"] == "***"
    record = tmp_path / "work" / "deployments" / "gemma-qat.deployment.json"
    assert deployed["record"] == str(record) and record.exists()
    assert any("creating endpoint gemma-qat" in message for message in progress)
    assert status["status"] == "InService" and status["created_by_loadgen"] is True
    assert [(row["kind"], row["name"]) for row in listed["endpoints"]] == [
        ("endpoint", "gemma-qat")]
    assert "endpoint gemma-qat" in deleted["deleted"] and len(deleted["deleted"]) == 3
    assert again["deleted"] == [] and "endpoint gemma-qat" in again["already_gone"]
    assert after["endpoints"] == []
    assert json.loads(record.read_text())["status"] == "Deleted"
    text = "".join(everything) + record.read_text()
    assert HF_SECRET not in text and AWS_SECRET not in text


def test_the_token_still_reaches_the_container(moto, tmp_path):
    async def body(client):
        return await call(client, "deploy_endpoint", name="gemma-bf16", image=IMAGE, role=ROLE,
                          **QUICK)

    deployed = session(server_options(tmp_path, moto), body)
    sagemaker = boto3.session.Session().client("sagemaker", endpoint_url=moto,
                                               region_name=REGION)
    model = sagemaker.describe_model(ModelName=deployed["deployment"]["model_name"])
    assert model["PrimaryContainer"]["Environment"]["HF_TOKEN"] == HF_SECRET


def test_a_secret_copied_into_another_variable_is_masked_too(moto, tmp_path):
    async def body(client):
        return await call(client, "deploy_endpoint", name="gemma-x", image=IMAGE, role=ROLE,
                          env=[f"SM_VLLM_EXTRA={HF_SECRET}"], metrics_frequency_s=60,
                          detailed_observability=True, **QUICK)

    deployed = session(server_options(tmp_path, moto), body)
    assert deployed["deployment"]["spec"]["environment"]["SM_VLLM_EXTRA"] == "***"
    # The endpoint config's MetricsConfig as asked (the wire format: test_cloudwatch_metrics).
    assert deployed["deployment"]["spec"]["metrics_config"] == {
        "EnableEnhancedMetrics": True, "MetricPublishFrequencyInSeconds": 60,
        "EnableDetailedObservability": True}


def test_without_allow_deploy_deploy_delete_and_deploying_scenarios_are_refused(moto, tmp_path):
    scenario = tmp_path / "deploys.yaml"
    scenario.write_text(textwrap.dedent(f"""\
        name: deploys
        hardware: {{instance_type: ml.g4dn.xlarge, region: {REGION}}}
        measurements:
          single_stream: {{requests: 1, output_tokens: 8}}
          fixed_length: {{enabled: false}}
          sweep: {{enabled: false}}
          fidelity: {{enabled: false}}
        phases:
          - label: a
            checkpoint: a
            deploy: {{image: "{IMAGE}", role: "{ROLE}", model_id: org/model}}
        """))

    async def body(client):
        return (await call_error(client, "deploy_endpoint", name="gemma-qat", image=IMAGE,
                                 role=ROLE, **QUICK),
                await call_error(client, "delete_endpoint", name="gemma-qat"),
                await call_error(client, "run_scenario", file=str(scenario)),
                await call(client, "list_endpoints"))

    deploy, delete, run, listed = session(server_options(tmp_path, moto, allow_deploy=False),
                                          body)
    for text, tool in ((deploy, "deploy_endpoint"), (delete, "delete_endpoint"),
                       (run, "this scenario")):
        assert f"refused: {tool}" in text and "--allow-deploy" in text, text
    assert listed["endpoints"] == []  # nothing was created
    assert not (tmp_path / "work" / "deployments").exists()


def test_aws_errors_are_one_line_tool_errors(moto, tmp_path):
    async def body(client):
        return (await call_error(client, "endpoint_status", name="nope"),
                await call_error(client, "deploy_endpoint", name="bad_name!", image=IMAGE,
                                 role=ROLE, **QUICK),
                await call_error(client, "deploy_endpoint", name="gemma-qat", image=IMAGE,
                                 **QUICK))

    missing, bad_name, no_role = session(server_options(tmp_path, moto), body)
    assert "endpoint 'nope' not found" in missing
    assert "is not valid for SageMaker" in bad_name
    assert "give role" in no_role
    assert all("\n" not in text and "Traceback" not in text
               for text in (missing, bad_name, no_role))


def test_a_deploy_that_fails_deletes_what_it_created(moto, tmp_path, script_status):
    reason = "The primary container did not pass the ping health check."
    script_status("Creating", "Failed", failure_reason=reason)

    async def body(client):
        error = await call_error(client, "deploy_endpoint", name="gemma-oom", image=IMAGE,
                                 role=ROLE, **QUICK)
        return error, await call(client, "list_endpoints", include_orphans=True)

    error, listed = session(server_options(tmp_path, moto), body)
    assert f"did not reach InService: {reason} (deleted what was created)" in error
    assert listed["endpoints"] == []
