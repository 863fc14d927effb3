import pytest

"""`loadgen sweep --target sagemaker://...` end to end, as a user runs it (a subprocess).

The SageMaker results file must have the same fields as the HTTP target's, so that
reports and comparisons treat both alike.
"""

import json
import os
import subprocess
import sys

from tests.helpers.sagemaker_server import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SageMakerTestServer,
)

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

LOADGEN = [sys.executable, "-c", "from loadgen.cli import main; main()"]


def aws_env(tmp_path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    return env


def sweep(target_args: list[str], out, env) -> subprocess.CompletedProcess:
    return subprocess.run([*LOADGEN, "sweep", *target_args, "--concurrency", "1,4",
                           "--requests", "8", "--output-tokens", "6", "--input-tokens", "16",
                           "--quiet", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)


def shape(value):
    """The field names of a results document (values dropped), recursively."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None


def test_sweep_results_match_the_http_target(tmp_path, sim_url):
    env = aws_env(tmp_path)
    with SageMakerTestServer() as server:
        done = sweep(["--target", "sagemaker://openai", "--endpoint-url", server.url],
                     tmp_path / "sagemaker.json", env)
    assert done.returncode == 0, done.stderr
    done_http = sweep(["--target", sim_url], tmp_path / "http.json", env)
    assert done_http.returncode == 0, done_http.stderr
    sagemaker = json.loads((tmp_path / "sagemaker.json").read_text())
    http = json.loads((tmp_path / "http.json").read_text())

    # Server-side /metrics samples exist only where the server exposes them (not SageMaker);
    # CloudWatch metrics only for SageMaker (skipped here: the runtime is local, no emulator).
    for level in sagemaker["levels"] + http["levels"]:
        assert "server_metrics" in level
        level.pop("server_metrics")
        level["timeline"].pop("sources")  # which server series sit on it: target-specific
    for level in sagemaker["levels"]:
        assert level.pop("cloudwatch")["status"] == "skipped"
    assert shape(sagemaker["levels"]) == shape(http["levels"])
    assert set(http) <= set(sagemaker)
    assert [level["load"]["concurrency"] for level in sagemaker["levels"]] == [1, 4]
    for level in sagemaker["levels"]:
        assert level["requests"]["completed"] == 8 and level["requests"]["failed"] == 0
        assert level["output_tokens"] == 8 * 6 and level["ttft_ms"]["count"] == 8
    target = sagemaker["target"]
    assert target["url"] == "sagemaker://openai" and target["kind"] == "sagemaker"
    assert target["detected_payload_format"] == "openai" and target["region"] == REGION
    text = json.dumps(sagemaker) + done.stdout + done.stderr
    assert SECRET_KEY not in text and ACCESS_KEY not in text and "Signature=" not in text


def test_sweep_counts_errors_by_type(tmp_path):
    with SageMakerTestServer() as server:
        done = sweep(["--target", "sagemaker://stream-model-error-late", "--endpoint-url",
                      server.url, "--payload-format", "openai"], tmp_path / "r.json",
                     aws_env(tmp_path))
    assert done.returncode == 3, done.stderr  # every request failed: not a success
    assert "Error: all 16 requests failed (ModelStreamError×16)" in done.stderr
    levels = json.loads((tmp_path / "r.json").read_text())["levels"]
    for level in levels:
        assert level["requests"]["failed"] == 8
        assert level["requests"]["errors"] == {"ModelStreamError": 8}
        assert level["requests"]["error_messages"]["ModelStreamError"]


def test_sweep_fails_fast_with_one_line(tmp_path):
    with SageMakerTestServer() as server:
        done = sweep(["--target", "sagemaker://missing", "--endpoint-url", server.url],
                     tmp_path / "r.json", aws_env(tmp_path))
        assert len(server.requests) == 1  # only the preflight: no load was generated
    assert done.returncode != 0 and not (tmp_path / "r.json").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Endpoint missing of account" in lines[0]

    env = aws_env(tmp_path)
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    done = sweep(["--target", "sagemaker://openai", "--endpoint-url", "http://127.0.0.1:9"],
                 tmp_path / "r.json", env)
    assert done.returncode != 0 and "no AWS credentials found" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
