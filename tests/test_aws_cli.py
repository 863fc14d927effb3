"""``loadgen endpoint ...`` and ``loadgen facts --endpoint`` through click's CliRunner, against moto in server mode."""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from loadgen.aws import parse_env
from loadgen.cli import endpoint as cli_endpoint
from loadgen.cli.endpoint import endpoint, facts, parse_tags
from loadgen.errors import ConfigError
from tests.helpers.aws_env import isolate_aws, reset_moto

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text())
REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11-gpu-py312"
HF_SECRET = "hf_not_a_real_token_77d1e0"


@pytest.fixture
def moto(moto_url, monkeypatch, tmp_path):
    isolate_aws(monkeypatch, tmp_path, region=REGION)
    monkeypatch.chdir(tmp_path)
    reset_moto(moto_url)
    return moto_url


@pytest.fixture
def sm(moto):
    return boto3.session.Session().client("sagemaker", endpoint_url=moto, region_name=REGION)


def run(moto_url: str, *args: str, input: str | None = None, command=endpoint):
    return CliRunner().invoke(command, [*args, "--endpoint-url", moto_url], input=input)


def deploy_args(name: str = "gemma-bf16", *extra: str) -> list[str]:
    return [
        "deploy", "--name", name, "--image", IMAGE, "--role", ROLE, "--model-id", "google/gemma-4-E2B-it",
        "--env", "SM_VLLM_MAX_MODEL_LEN=4096", "--instance-type", "ml.g4dn.xlarge", "--tags", "team=ml,phase=A",
        "--poll-interval", "0.01", "--facts-wait", "0", *extra,
    ]


def assert_one_line_error(result, expected: str, code: int = 2) -> None:
    assert result.exit_code == code, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert 'File "' not in result.output + result.stderr  # no Python traceback


def test_deploy_prints_time_and_record_and_never_the_hf_token(moto, sm, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    result = run(moto, *deploy_args())
    assert result.exit_code == 0, result.output
    everything = result.stdout + result.stderr
    assert HF_SECRET not in everything and "HF_TOKEN=***" in result.stderr
    assert "endpoint gemma-bf16: InService after" in result.stdout
    assert "s by SageMaker's CreationTime/LastModifiedTime" in result.stdout
    assert "endpoint gemma-bf16: Creating" not in result.stderr  # moto: InService at the first poll
    assert "endpoint gemma-bf16: InService" in result.stderr
    record_text = (tmp_path / "gemma-bf16.deployment.json").read_text()
    assert HF_SECRET not in record_text
    record = json.loads(record_text)
    assert record["status"] == "InService" and record["spec"]["tags"] == {"team": "ml", "phase": "A"}
    # The token did reach the container's environment (that is how the container gets it).
    model = sm.describe_model(ModelName=record["model_name"])
    assert model["PrimaryContainer"]["Environment"]["HF_TOKEN"] == HF_SECRET


def test_deploy_json_then_status_list_delete(moto, sm):
    deployed = run(moto, *deploy_args("gemma-qat", "--json", "--record", "runs/qat.json",
                                      "--metrics-frequency", "30", "--detailed-observability"))
    assert deployed.exit_code == 0, deployed.output
    record = json.loads(deployed.stdout)
    assert record["format"] == "loadgen-sagemaker-deployment/1" and Path("runs/qat.json").exists()
    assert record["spec"]["metrics_config"] == {"EnableEnhancedMetrics": True,
                                                "MetricPublishFrequencyInSeconds": 30,
                                                "EnableDetailedObservability": True}

    status = run(moto, "status", "gemma-qat")
    assert status.exit_code == 0 and "InService" in status.stdout and record["run_id"] in status.stdout
    assert json.loads(run(moto, "status", "gemma-qat", "--json").stdout)["status"] == "InService"

    listed = run(moto, "list")
    assert listed.exit_code == 0 and "gemma-qat" in listed.stdout
    assert [row["name"] for row in json.loads(run(moto, "list", "--json").stdout)] == ["gemma-qat"]

    deleted = run(moto, "delete", "gemma-qat", "--poll-interval", "0.01")
    assert deleted.exit_code == 0, deleted.output
    assert "deleted endpoint gemma-qat" in deleted.stdout and f"deleted model {record['model_name']}" in deleted.stdout
    assert sm.list_endpoints()["Endpoints"] == [] and sm.list_models()["Models"] == []

    again = run(moto, "delete", "--record", "runs/qat.json", "--poll-interval", "0.01")
    assert again.exit_code == 0 and "nothing to delete" in again.stdout
    assert "already gone: endpoint gemma-qat" in again.stdout
    assert json.loads(Path("runs/qat.json").read_text())["status"] == "Deleted"
    assert "no endpoints created by loadgen" in run(moto, "list").stdout


def test_refused_instance_type_is_one_line_and_rolled_back(moto, sm):
    args = deploy_args()
    args[args.index("ml.g4dn.xlarge")] = "ml.g6.xlarge"  # moto's old list refuses it; the tool passes it on
    result = run(moto, *args)
    assert_one_line_error(result, "unknown instance type 'ml.g6.xlarge'")
    assert sm.list_models()["Models"] == []


@pytest.mark.parametrize(
    "args, expected",
    [
        (["status", "missing"], "endpoint 'missing' not found"),
        (["delete"], "either an endpoint NAME or --record"),
        (["delete", "--record", "nope.json"], "nope.json does not exist"),
        (["deploy", "--name", "bad_name", "--image", IMAGE, "--role", ROLE], "not valid for SageMaker"),
        (["deploy", "--name", "x", "--image", IMAGE, "--role", ROLE, "--metrics-frequency", "15"],
         "'15' is not one of '10', '30'"),
        (
            ["deploy", "--name", "x", "--image", IMAGE, "--role", ROLE, "--env", "NOT_SET_ANYWHERE_42"],
            "not set in your environment",
        ),
    ],
)
def test_bad_input_is_one_line(moto, args, expected):
    assert_one_line_error(run(moto, *args), expected)


def test_missing_credentials_is_one_line(moto, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert_one_line_error(run(moto, "list"), "no AWS credentials found")


def test_ctrl_c_with_yes_deletes_what_was_created(moto, sm, script_status, monkeypatch):
    script_status("Creating", "Creating", "InService")
    original = cli_endpoint.StatusLine.__call__
    interrupted = []

    def press_ctrl_c_once(self, status, elapsed):
        original(self, status, elapsed)
        if status == "Creating" and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_endpoint.StatusLine, "__call__", press_ctrl_c_once)
    result = run(moto, *deploy_args("gemma-a", "--yes"))
    assert result.exit_code == 130, result.output
    assert "deleted endpoint gemma-a" in result.stdout
    assert "deleting gemma-a: endpoint gemma-a: Creating" in result.stderr  # waited for Creating to end
    assert sm.list_endpoints()["Endpoints"] == [] and sm.list_models()["Models"] == []
    assert json.loads(Path("gemma-a.deployment.json").read_text())["status"] == "Deleted"


def test_ctrl_c_answered_no_leaves_it_and_says_how_to_delete(moto, sm, script_status, monkeypatch):
    script_status("Creating")
    original = cli_endpoint.StatusLine.__call__

    def press_ctrl_c(self, status, elapsed):
        original(self, status, elapsed)
        if status == "Creating":
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_endpoint.StatusLine, "__call__", press_ctrl_c)
    result = run(moto, *deploy_args("gemma-b"), input="n\n")
    assert result.exit_code == 130
    assert "interrupted: delete what was created" in result.stderr
    assert "loadgen endpoint delete --record gemma-b.deployment.json" in result.stderr
    assert [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]] == ["gemma-b"]


def test_failed_deploy_shows_reason_and_log_tail_then_deletes_with_yes(moto, sm, script_status):
    reason = "The primary container for production variant AllTraffic did not pass the ping health check."
    script_status("Creating", "Failed", failure_reason=reason)
    logs = boto3.session.Session().client("logs", endpoint_url=moto, region_name=REGION)
    group = "/aws/sagemaker/Endpoints/gemma-oom"
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="AllTraffic/i-0abc")
    lines = (LOGS / "vllm-0.10.2-sagemaker-oom.log").read_text().splitlines()
    now_ms = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=group,
        logStreamName="AllTraffic/i-0abc",
        logEvents=[{"timestamp": now_ms + i, "message": line} for i, line in enumerate(lines)],
    )
    result = run(moto, *deploy_args("gemma-oom", "--yes"))
    assert_one_line_error(result, reason)
    assert "  | torch.OutOfMemoryError: CUDA out of memory" in result.stderr.replace(
        "(EngineCore_DP0 pid=301) ERROR 03-02 12:03:44 [core.py:712] ", ""
    )
    assert "deleted endpoint gemma-oom" in result.stdout
    assert sm.list_endpoints()["Endpoints"] == []


def test_facts_from_an_endpoints_cloudwatch_log(moto):
    run(moto, *deploy_args("gemma-facts"))
    logs = boto3.session.Session().client("logs", endpoint_url=moto, region_name=REGION)
    group = "/aws/sagemaker/Endpoints/gemma-facts"
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="AllTraffic/i-0abc")
    lines = (LOGS / "vllm-0.11.0-ansi.log").read_text().splitlines()
    now_ms = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=group,
        logStreamName="AllTraffic/i-0abc",
        logEvents=[{"timestamp": now_ms + i, "message": line} for i, line in enumerate(lines)],
    )
    result = run(moto, "--endpoint", "gemma-facts", "--json", command=facts)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == EXPECTED["vllm-0.11.0-ansi.log"]
    missing = run(moto, "--endpoint", "never-deployed", command=facts)
    assert_one_line_error(missing, "no CloudWatch log group /aws/sagemaker/Endpoints/never-deployed")


# ---------------------------------------------------------------------------
# option parsing (pure)


def test_parse_env_copies_named_values_and_hf_token_from_the_environment():
    environ = {"HF_TOKEN": HF_SECRET, "MY_FLAG": "1"}
    assert parse_env(("SM_VLLM_MAX_MODEL_LEN=4096", "MY_FLAG", "EMPTY="), environ) == {
        "SM_VLLM_MAX_MODEL_LEN": "4096",
        "MY_FLAG": "1",
        "EMPTY": "",
        "HF_TOKEN": HF_SECRET,
    }
    assert parse_env(("HF_TOKEN=explicit",), environ) == {"HF_TOKEN": "explicit"}
    assert parse_env((), {}) == {}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_env(("1BAD=x",), environ)


def test_parse_tags():
    assert parse_tags(("a=1,b=2", "c=x=y")) == {"a": "1", "b": "2", "c": "x=y"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_tags(("novalue",))
    with pytest.raises(ConfigError, match="reserved"):
        parse_tags(("aws:foo=1",))
