"""SageMaker control plane against moto in server mode: deploy, facts, failure, teardown, list, errors.

moto creates endpoints InService at once and never writes endpoint logs, so
tests write the CloudWatch log lines themselves and, where a test needs the
Creating -> Failed path, script the statuses moto's DescribeEndpoint reports.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.sagemaker.models import sagemaker_backends

from loadgen.aws import (
    AwsConfig,
    DeployCancelled,
    DeployFailed,
    DeploySpec,
    delete_deployment,
    delete_endpoint_named,
    deploy_endpoint,
    endpoint_facts,
    endpoint_status,
    list_deployments,
    load_record,
)
from loadgen.aws.errors import aws_call, map_client_error
from loadgen.aws.logs import endpoint_facts_now, tail_endpoint_log
from loadgen.errors import AuthError, AwsError, ConfigError
from tests.helpers.aws_env import isolate_aws, reset_moto, write_endpoint_log

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text())
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11-gpu-py312"
INSTANCE = "ml.g4dn.xlarge"  # moto's instance list is old: it rejects ml.g6.xlarge
HF_SECRET = "hf_not_a_real_token_5f3a9c"


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture
def moto(moto_url, monkeypatch, tmp_path):
    """A clean moto account, fake credentials, and no local AWS config leaking in."""
    isolate_aws(monkeypatch, tmp_path, region=REGION)
    reset_moto(moto_url)
    return moto_url


@pytest.fixture
def sm(moto):
    return boto3.session.Session().client("sagemaker", endpoint_url=moto, region_name=REGION)


def fixture_lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def spec(name: str = "gemma-qat", **changes) -> DeploySpec:
    values = dict(
        name=name,
        image=IMAGE,
        role_arn=ROLE,
        model_id="google/gemma-4-E2B-it-qat-w4a16-ct",
        environment={"SM_VLLM_MAX_MODEL_LEN": "4096", "HF_TOKEN": HF_SECRET},
        instance_type=INSTANCE,
        startup_timeout_s=1800,
        tags={"team": "ml"},
    )
    values.update(changes)
    return DeploySpec(**values)


def deploy(moto_url: str, tmp_path: Path, the_spec: DeploySpec | None = None, **kwargs):
    kwargs.setdefault("poll_s", 0.01)
    kwargs.setdefault("facts_wait_s", 0)
    the_spec = the_spec or spec()
    return deploy_endpoint(the_spec, endpoint_url=moto_url, record_path=tmp_path / f"{the_spec.name}.json", **kwargs)


def tags_of(sm, arn: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=arn)["Tags"]}


# ---------------------------------------------------------------------------
# deploy -> InService -> delete


def test_deploy_in_service_with_facts_then_delete(moto, sm, tmp_path):
    write_endpoint_log(moto, REGION, "gemma-qat", fixture_lines("vllm-0.33.0.log"))
    statuses = []
    dep = deploy(moto, tmp_path, on_status=lambda status, elapsed: statuses.append((status, elapsed)))

    assert dep.in_service and dep.status == "InService"
    assert dep.created == ("model", "endpoint_config", "endpoint")
    assert 0 <= dep.seconds_to_in_service < 30 and dep.aws_seconds_to_in_service == 0.0
    assert dep.facts == EXPECTED["vllm-0.33.0.log"]
    assert [s for s, _ in statuses][-1] == "InService"
    assert [e for _, e in statuses] == sorted(e for _, e in statuses)

    # What SageMaker got: the container env (HF_TOKEN included), the variant, the tags.
    model = sm.describe_model(ModelName=dep.model_name)
    assert model["PrimaryContainer"]["Environment"] == {
        "SM_VLLM_MAX_MODEL_LEN": "4096",
        "HF_TOKEN": HF_SECRET,
        "SM_VLLM_MODEL": "google/gemma-4-E2B-it-qat-w4a16-ct",
    }
    variant = sm.describe_endpoint_config(EndpointConfigName=dep.endpoint_config_name)["ProductionVariants"][0]
    assert (variant["InstanceType"], variant["ModelName"], variant["ContainerStartupHealthCheckTimeoutInSeconds"]) == (
        INSTANCE,
        dep.model_name,
        1800,
    )
    for arn in (model["ModelArn"], sm.describe_endpoint(EndpointName="gemma-qat")["EndpointArn"]):
        tags = tags_of(sm, arn)
        assert tags["loadgen:created-by"] == "loadgen" and tags["loadgen:run-id"] == dep.run_id
        assert tags["loadgen:endpoint"] == "gemma-qat" and tags["team"] == "ml"

    # The record: complete, JSON, secret-free.
    text = dep.record_path.read_text()
    assert HF_SECRET not in text
    record = json.loads(text)
    assert record == dep.to_json() and record["spec"]["environment"]["HF_TOKEN"] == "***"

    teardown = delete_deployment(dep.record_path, poll_s=0.01)
    assert set(teardown.deleted) == {
        "endpoint gemma-qat",
        f"endpoint config {dep.endpoint_config_name}",
        f"model {dep.model_name}",
    }
    assert sm.list_endpoints()["Endpoints"] == [] and sm.list_models()["Models"] == []
    assert load_record(dep.record_path).status == "Deleted"

    again = delete_deployment(dep.record_path, poll_s=0.01)  # idempotent
    assert again.deleted == () and len(again.already_gone) == 3


def test_record_names_each_resource_before_it_is_created(moto, tmp_path):
    seen = {}
    record = tmp_path / "gemma-qat.json"

    def on_status(status, elapsed):
        if status.startswith("creating"):
            seen[status.rsplit(" ", 1)[0]] = json.loads(record.read_text())["created"]

    dep = deploy(moto, tmp_path, on_status=on_status)
    assert seen == {
        "creating model": [],
        "creating endpoint config": ["model"],
        "creating endpoint": ["model", "endpoint_config"],
    }
    assert json.loads(record.read_text())["model_name"] == dep.model_name


def test_facts_skip_an_older_start_of_the_same_endpoint_name(moto, tmp_path):
    # The log group outlives an endpoint: an earlier deployment of this name logged a full start.
    write_endpoint_log(moto, REGION, "gemma-qat", fixture_lines("vllm-0.10.2.log"), minutes_ago=20)
    # This deployment's start has not reached the KV cache yet.
    write_endpoint_log(moto, REGION, "gemma-qat", [line for line in fixture_lines("vllm-0.33.0.log") if "KV cache" not in line])
    aws = AwsConfig(endpoint_url=moto)
    assert endpoint_facts("gemma-qat", aws).kv_cache_tokens == 723_484  # the whole group mixes the two starts
    dep = deploy(moto, tmp_path)
    assert dep.facts["weights_load_s"] == 66.19 and dep.facts["kv_cache_tokens"] is None
    now = endpoint_facts_now("gemma-qat", endpoint_url=moto)
    assert now.weights_load_s == 66.19 and now.kv_cache_tokens is None


def test_cloudwatch_reading_pages_and_missing_group(moto):
    lines = [f"line {i}" for i in range(150)] + fixture_lines("vllm-0.27.1.log")
    write_endpoint_log(moto, REGION, "paged", lines)
    aws = AwsConfig(endpoint_url=moto)
    assert endpoint_facts("paged", aws).to_dict() == EXPECTED["vllm-0.27.1.log"]
    assert tail_endpoint_log("paged", aws, lines=3) == lines[-3:]
    assert tail_endpoint_log("never-logged", aws) == []
    with pytest.raises(AwsError, match="no CloudWatch log group /aws/sagemaker/Endpoints/never-logged"):
        endpoint_facts("never-logged", aws)


# ---------------------------------------------------------------------------
# failure paths


def test_failed_endpoint_reports_reason_and_log_tail_and_stays_for_inspection(moto, sm, tmp_path, script_status):
    reason = "The primary container for production variant AllTraffic did not pass the ping health check."
    script_status("Creating", "Creating", "Failed", failure_reason=reason)
    write_endpoint_log(moto, REGION, "gemma-qat", fixture_lines("vllm-0.10.2-sagemaker-oom.log"))
    statuses = []
    with pytest.raises(DeployFailed) as caught:
        deploy(moto, tmp_path, on_status=lambda status, elapsed: statuses.append(status))
    dep = caught.value.deployment
    assert statuses[-3:] == ["Creating", "Creating", "Failed"]
    assert dep.status == "Failed" and dep.failure_reason == reason and dep.seconds_to_in_service is None
    assert any("OutOfMemoryError" in line for line in dep.log_tail) and len(dep.log_tail) <= 20
    assert reason in str(caught.value) and "loadgen endpoint delete --record" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert load_record(dep.record_path).failure_reason == reason
    assert sm.describe_endpoint(EndpointName="gemma-qat")["EndpointStatus"] == "Failed"
    assert len(delete_deployment(dep, poll_s=0.01).deleted) == 3


def test_wait_timeout_is_a_failure_that_says_it_still_bills(moto, tmp_path, script_status):
    script_status(*["Creating"] * 1000)
    with pytest.raises(DeployFailed, match="still Creating after 0 s"):
        deploy(moto, tmp_path, wait_timeout_s=0.05)


def test_cancel_event_stops_the_wait_and_teardown_waits_for_creating_to_end(moto, sm, tmp_path, script_status):
    script_status("Creating", "Creating", "Creating", "InService")
    cancel = threading.Event()

    def on_status(status, elapsed):
        if status == "Creating":
            cancel.set()

    with pytest.raises(DeployCancelled) as caught:
        deploy(moto, tmp_path, on_status=on_status, cancel=cancel)
    teardown_statuses = []
    teardown = delete_deployment(
        caught.value.deployment, poll_s=0.01, on_status=lambda status, elapsed: teardown_statuses.append(status)
    )
    assert "endpoint gemma-qat: Creating" in teardown_statuses  # SageMaker refuses to delete while Creating
    assert len(teardown.deleted) == 3 and sm.list_endpoints()["Endpoints"] == []


def test_keyboard_interrupt_leaves_a_record_teardown_can_use(moto, sm, tmp_path):
    def on_status(status, elapsed):
        if status.startswith("creating endpoint config"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deploy(moto, tmp_path, on_status=on_status)
    record = load_record(tmp_path / "gemma-qat.json")
    assert record.created == ("model",) and record.is_live
    teardown = delete_deployment(record, poll_s=0.01)
    assert teardown.deleted == (f"model {record.model_name}",)
    assert set(teardown.already_gone) == {"endpoint gemma-qat", f"endpoint config {record.endpoint_config_name}"}
    assert sm.list_models()["Models"] == []


def test_refused_create_rolls_back_and_the_tool_does_not_restrict_instance_types(moto, sm, tmp_path):
    # ml.g6.xlarge is a real type; moto's old list refuses it, which stands in for SageMaker refusing a typo.
    with pytest.raises(AwsError) as caught:
        deploy(moto, tmp_path, spec(instance_type="ml.g6.xlarge"))
    message = str(caught.value)
    assert "unknown instance type 'ml.g6.xlarge'" in message and "\n" not in message and "[...]" not in message
    assert len(message) < 300
    assert sm.list_models()["Models"] == []  # the model created before the refusal was deleted
    assert load_record(tmp_path / "gemma-qat.json").status == "Deleted"


def test_existing_endpoint_and_live_record_are_refused(moto, tmp_path):
    dep = deploy(moto, tmp_path)
    with pytest.raises(ConfigError, match="already exists"):
        deploy(moto, tmp_path / "other")
    with pytest.raises(ConfigError, match="not deleted yet"):
        deploy_endpoint(spec(name="second"), endpoint_url=moto, record_path=dep.record_path, poll_s=0.01)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"name": "bad_name"}, "not valid for SageMaker"),
        ({"name": "x" * 64}, "not valid for SageMaker"),
        ({"instance_count": 0}, "at least 1"),
        ({"environment": {"SM_VLLM_MODEL": "other"}}, "only --model-id"),
    ],
)
def test_bad_spec_is_refused_before_any_call(changes, message):
    with pytest.raises(ConfigError, match=message):
        spec(**changes).validate()


# ---------------------------------------------------------------------------
# delete by name, list, status


def test_delete_by_name_and_orphan_cleanup(moto, sm, tmp_path):
    dep = deploy(moto, tmp_path)
    first = delete_endpoint_named("gemma-qat", endpoint_url=moto, poll_s=0.01)
    assert len(first.deleted) == 3
    assert delete_endpoint_named("gemma-qat", endpoint_url=moto, poll_s=0.01).deleted == ()

    # Someone deleted only the endpoint: the tags lead to its leftover config and model.
    dep2 = deploy(moto, tmp_path / "2")
    sm.delete_endpoint(EndpointName="gemma-qat")
    sm.create_model(ModelName="gemma-qat-unrelated", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": IMAGE})
    second = delete_endpoint_named("gemma-qat", endpoint_url=moto, poll_s=0.01)
    assert set(second.deleted) == {f"endpoint config {dep2.endpoint_config_name}", f"model {dep2.model_name}"}
    assert [m["ModelName"] for m in sm.list_models()["Models"]] == ["gemma-qat-unrelated"]
    assert dep.model_name != dep2.model_name  # each run gets its own names


def test_list_finds_only_loadgen_resources(moto, sm, tmp_path):
    deploy(moto, tmp_path, spec(name="ours"))
    sm.create_model(ModelName="theirs-model", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": IMAGE})
    sm.create_endpoint_config(
        EndpointConfigName="theirs-cfg",
        ProductionVariants=[
            {"VariantName": "v", "ModelName": "theirs-model", "InstanceType": INSTANCE, "InitialInstanceCount": 1}
        ],
    )
    sm.create_endpoint(EndpointName="theirs", EndpointConfigName="theirs-cfg")
    rows = list_deployments(endpoint_url=moto)
    assert [(r["kind"], r["name"], r["status"]) for r in rows] == [("endpoint", "ours", "InService")]
    sm.delete_endpoint(EndpointName="ours")
    orphans = list_deployments(endpoint_url=moto, include_orphans=True)
    assert sorted(r["kind"] for r in orphans) == ["endpoint_config", "model"]
    assert {r["status"] for r in orphans} == {"orphan"} and {r["endpoint"] for r in orphans} == {"ours"}


def test_status(moto, tmp_path):
    dep = deploy(moto, tmp_path)
    info = endpoint_status("gemma-qat", endpoint_url=moto)
    assert info["status"] == "InService" and info["endpoint_config"] == dep.endpoint_config_name
    assert info["created_by_loadgen"] and info["run_id"] == dep.run_id
    json.dumps(info)
    with pytest.raises(AwsError, match="endpoint 'nope' not found in us-east-1"):
        endpoint_status("nope", endpoint_url=moto)


# ---------------------------------------------------------------------------
# error mapping


def client_error(code: str, message: str, operation: str = "CreateModel") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@pytest.mark.parametrize(
    "code, message, kind, expected",
    [
        (
            "AccessDeniedException",
            "User: arn:aws:iam::123456789012:user/bob is not authorized to perform: sagemaker:CreateModel on resource: "
            "arn:aws:sagemaker:us-east-2:123456789012:model/x because no identity-based policy allows the action",
            AuthError,
            "lacks sagemaker:CreateModel",
        ),
        (
            "ResourceLimitExceeded",
            "The account-level service limit 'ml.g6.xlarge for endpoint usage' is 0 Instances, with current utilization "
            "of 0 Instances and a request delta of 1 Instances. Please use AWS Service Quotas to request an increase.",
            AwsError,
            "quota exceeded: The account-level service limit 'ml.g6.xlarge for endpoint usage'",
        ),
        (
            "ValidationException",
            "Could not assume role arn:aws:iam::123456789012:role/NoTrust. Please ensure that the role exists and allows "
            "principal 'sagemaker.amazonaws.com' to assume the role.",
            AwsError,
            "cannot assume arn:aws:iam::123456789012:role/NoTrust",
        ),
        (
            "ValidationException",
            "Requested image 123456789012.dkr.ecr.us-east-2.amazonaws.com/vllm:nope not found.",
            AwsError,
            "container image not usable",
        ),
        (
            "ValidationException",
            "1 validation error detected: Value 'ml.g99.xlarge' at 'productionVariants.1.member.instanceType' failed to "
            "satisfy constraint: Member must satisfy enum value set: [ml.t2.medium, ml.g6.xlarge, ml.p5.48xlarge]",
            AwsError,
            "unknown instance type 'ml.g99.xlarge'",
        ),
        ("ExpiredTokenException", "The security token included in the request is expired", AuthError, "refresh them"),
        ("ThrottlingException", "Rate exceeded", AwsError, "throttled"),
        ("ResourceInUse", "Cannot create already existing endpoint", AwsError, "the name is taken"),
        ("InternalFailure", "boom\nsecond line", AwsError, "InternalFailure: boom second line"),
    ],
)
def test_client_errors_map_to_one_clear_line(code, message, kind, expected):
    err = map_client_error(client_error(code, message), "create model 'x'")
    assert type(err) is kind
    assert str(err).startswith("create model 'x': ") and expected in str(err)
    assert "\n" not in str(err) and len(str(err)) < 450


def test_secrets_are_masked_in_mapped_messages():
    with pytest.raises(AwsError) as caught:
        with aws_call("create model 'x'", secrets=[HF_SECRET]):
            raise client_error("ValidationException", f"Invalid value {HF_SECRET} for Environment")
    assert HF_SECRET not in str(caught.value) and "***" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_missing_credentials_and_unreachable_endpoint_through_botocore(moto, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(AuthError, match="no AWS credentials found"):
        endpoint_status("x", endpoint_url=moto)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    closed = AwsConfig(endpoint_url="http://127.0.0.1:9", max_attempts=1).sagemaker()
    with pytest.raises(AwsError, match="cannot reach AWS"):
        with aws_call("describe endpoint 'x'"):
            closed.describe_endpoint(EndpointName="x")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigError, match="no AWS region"):
        AwsConfig().sagemaker()


def test_facts_of_a_long_lived_endpoint_come_from_its_startup_window(moto, sm, tmp_path):
    deploy(moto, tmp_path)
    endpoint = sagemaker_backends["123456789012"][REGION].endpoints["gemma-qat"]
    endpoint.creation_time -= timedelta(hours=3)  # created three hours ago
    write_endpoint_log(moto, REGION, "gemma-qat", fixture_lines("vllm-0.27.1.log"), minutes_ago=178)  # its start
    write_endpoint_log(moto, REGION, "gemma-qat", fixture_lines("vllm-0.33.0.log"))  # hours later: not its start
    assert sm.describe_endpoint(EndpointName="gemma-qat")["CreationTime"].timestamp() < time.time() - 3 * 3600 + 60
    assert endpoint_facts_now("gemma-qat", endpoint_url=moto).to_dict() == EXPECTED["vllm-0.27.1.log"]
