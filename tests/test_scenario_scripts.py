"""The study scripts check their environment up front and fail fast, before any AWS call.

``LOADGEN`` points at a recorder script, so a test can see whether (and how) the
script would have started loadgen; with a variable missing it must not have.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
L4_VARS = {"SAGEMAKER_VLLM_IMAGE": "123.dkr.ecr.us-east-2.amazonaws.com/vllm:latest",
           "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/SageMaker",
           "HF_TOKEN": "hf_x", "AWS_ACCESS_KEY_ID": "AKIDX", "AWS_SECRET_ACCESS_KEY": "s"}
T4_VARS = {"T4_BF16_URL": "http://10.0.0.5:8000", "T4_QAT_URL": "http://10.0.0.5:8001",
           "T4_PRICE_PER_HOUR": "0.54"}


@pytest.fixture
def recorder(tmp_path):
    """A stand-in for loadgen that writes its arguments to a file."""
    calls = tmp_path / "calls.txt"
    script = tmp_path / "fake-loadgen"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    script.chmod(0o755)
    return script, calls


def run_script(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    """The script under an otherwise empty environment (``env -i``)."""
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash",
                           str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=30)


def test_l4_script_names_every_missing_variable_and_starts_nothing(recorder):
    fake, calls = recorder
    done = run_script("l4-aba.sh", {"LOADGEN": str(fake)})
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert [line.split(":")[1].strip().split()[0] for line in lines] == [
        "SAGEMAKER_VLLM_IMAGE", "SAGEMAKER_ROLE_ARN", "HF_TOKEN", "no"]
    assert lines[3].startswith("l4-aba.sh: no AWS credentials: export AWS_PROFILE")
    assert not calls.exists()


def test_l4_script_needs_both_halves_of_an_access_key(recorder):
    fake, calls = recorder
    env = {**L4_VARS, "LOADGEN": str(fake)}
    del env["AWS_SECRET_ACCESS_KEY"]
    done = run_script("l4-aba.sh", env)
    assert done.returncode == 2 and "no AWS credentials" in done.stderr
    assert not calls.exists()


def test_l4_script_runs_the_scenario_when_everything_is_set(recorder, tmp_path):
    fake, calls = recorder
    done = run_script("l4-aba.sh", {**L4_VARS, "LOADGEN": str(fake),
                                    "OUT_DIR": str(tmp_path / "o")}, "--yes")
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split() == [
        "scenario", "run", str(SCRIPTS.parent / "scenarios" / "l4-sagemaker-gemma4-e2b.yaml"),
        "--out", str(tmp_path / "o"), "--yes"]


def test_t4_script_checks_urls_and_price(recorder):
    fake, calls = recorder
    done = run_script("t4-compare.sh", {"LOADGEN": str(fake), "T4_QAT_URL": "http://h:8001"})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "t4-compare.sh: T4_BF16_URL is not set: export the URL of the vLLM server with "
        "google/gemma-4-E2B-it (e.g. http://10.0.0.5:8000)",
        "t4-compare.sh: T4_PRICE_PER_HOUR is not set: export the T4 VM's price in USD per hour "
        "(e.g. 0.54), for $ per 1M tokens"]
    assert not calls.exists()
    done = run_script("t4-compare.sh", {**T4_VARS, "LOADGEN": str(fake)}, "--phases", "qat")
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split()[-4:] == ["--out", "t4-compare-results", "--phases", "qat"]


@pytest.mark.parametrize("name", ["l4-aba.sh", "t4-compare.sh", "demo.sh"])
def test_scripts_say_when_loadgen_is_not_installed(name, tmp_path):
    env = {**L4_VARS, **T4_VARS, "LOADGEN": str(tmp_path / "no-such-loadgen")}
    done = run_script(name, env)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"{name}: '{tmp_path / 'no-such-loadgen'}' not found: "
                                   "pip install loadgen, or export LOADGEN=/path/to/loadgen")
