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
T4_VARS = {"T4_PRICE_PER_HOUR": "0.54"}


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


def fake_program(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(f"#!/bin/sh\n{body}\n")
    (directory / name).chmod(0o755)
    return directory


def test_t4_script_checks_price_and_vllm(recorder, tmp_path):
    fake, calls = recorder
    done = run_script("t4-compare.sh", {"LOADGEN": str(fake), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "t4-compare.sh: T4_PRICE_PER_HOUR is not set: export the T4 VM's price in USD per hour "
        "(e.g. 0.54), for $ per 1M tokens",
        "t4-compare.sh: 'vllm' not found: run this on the T4 VM with vLLM installed, or export "
        "T4_HOST=user@vm to start vLLM there"]
    assert not calls.exists()
    bin_dir = fake_program(tmp_path / "bin", "vllm", "exit 0")
    done = run_script("t4-compare.sh", {**T4_VARS, "LOADGEN": str(fake),
                                        "PATH": f"{bin_dir}:/usr/bin:/bin"}, "--phases", "qat")
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split()[-4:] == ["--out", "t4-compare-results", "--phases", "qat"]


def test_t4_script_fails_fast_when_ssh_would_prompt(recorder, tmp_path):
    fake, calls = recorder
    bin_dir = fake_program(tmp_path / "bin", "ssh",
                           'echo "$@" > "$(dirname "$0")/args"; exit 255')
    env = {**T4_VARS, "LOADGEN": str(fake), "T4_HOST": "me@t4-vm",
           "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = run_script("t4-compare.sh", env)
    assert done.returncode == 2 and not calls.exists()
    assert done.stderr.strip() == ("t4-compare.sh: cannot ssh to me@t4-vm without a prompt: "
                                   "check that `ssh me@t4-vm true` works with your key or agent")
    assert (bin_dir / "args").read_text().split() == [
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "--", "me@t4-vm", "true"]


@pytest.mark.parametrize("name", ["l4-aba.sh", "t4-compare.sh", "demo.sh"])
def test_scripts_say_when_loadgen_is_not_installed(name, tmp_path):
    env = {**L4_VARS, **T4_VARS, "LOADGEN": str(tmp_path / "no-such-loadgen"),
           "T4_VLLM": "sh"}  # on PATH: only loadgen is missing
    done = run_script(name, env)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"{name}: '{tmp_path / 'no-such-loadgen'}' not found: "
                                   "pip install loadgen, or export LOADGEN=/path/to/loadgen")
