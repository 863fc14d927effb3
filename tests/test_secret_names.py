"""One rule for what is secret by its name (loadgen.redact): the deployment record, the
report summary and the MCP scrubber hide the same variables."""

from __future__ import annotations

import json

import pytest

from loadgen.aws import DeploySpec
from loadgen.mcp.redact import secret_values
from loadgen.redact import is_secret_name
from loadgen.report.summary import build_summary
from tests.helpers.report_fixtures import l4_study

SECRET_NAMES = ("HF_TOKEN", "hf_token", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY",
                "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "MY_SECRET_SAUCE", "SERVICE_KEY",
                "API_KEYS", "apikey", "DB_PASSWORD", "authorization", "GCP_CREDENTIALS")
PLAIN_NAMES = ("SM_VLLM_MAX_NUM_BATCHED_TOKENS", "kv_cache_tokens", "SM_VLLM_TOKENIZER",
               "SM_VLLM_MAX_MODEL_LEN", "keyboard_layout", "model_load_gib")


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_counts_and_settings_are_not_secrets(name):
    assert not is_secret_name(name)


def test_deploy_record_and_report_summary_hide_the_same_names():
    values = {name: f"value-of-{name.lower()}-1234" for name in SECRET_NAMES + PLAIN_NAMES}

    described = DeploySpec(name="ep", image="img", role_arn="arn:role",
                           environment=values).describe()["environment"]
    assert {k for k, v in described.items() if v == "***"} == set(SECRET_NAMES)

    phases = l4_study()
    phases[0]["server"]["container"] = dict(values)
    phases[0]["target"].update(values)
    summary = json.dumps(build_summary(phases, run_info=dict(values)))
    for name in SECRET_NAMES:
        assert values[name] not in summary, name
    for name in PLAIN_NAMES:
        assert values[name] in summary, name

    masked = secret_values(values)  # the MCP server's last boundary
    assert sorted(masked) == sorted({values[name] for name in SECRET_NAMES})
