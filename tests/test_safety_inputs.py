"""Hostile inputs (issue 16, items 8-10): bounded token counts and files, checked before any
load; a preflight that keeps its timeouts; an API key echoed by a server never stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.bounds import MAX_INPUT_ENV, MAX_OUTPUT_ENV
from loadgen.cli.main import cli
from loadgen.errors import ConfigError
from loadgen.scenario.loader import ScenarioError, load_scenario
from loadgen.workload.datasets import load_dataset
from loadgen.workload.prompts import PromptSource
from loadgen.workload.settings import WorkloadSettings
from loadgen.workload.trace import load_trace

DEMO = Path(__file__).resolve().parents[1] / "scenarios" / "demo-simulated.yaml"
# Nothing listens on port 9: a check that came after the preflight would say so instead.
NOWHERE = "http://127.0.0.1:9"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# -- item 8: token bounds, every front door ----------------------------------------------

@pytest.mark.parametrize("option, value", [("--input-tokens", "100000000000"),
                                           ("--output-tokens", "1000001")])
def test_token_counts_above_the_bound_are_refused_before_any_load(option, value):
    line = assert_one_error(invoke("run", "--target", NOWHERE, option, value),
                            option, "above the limit of 1,000,000")
    assert (MAX_INPUT_ENV if option == "--input-tokens" else MAX_OUTPUT_ENV) in line


def test_the_bounds_are_configurable(monkeypatch):
    monkeypatch.setenv(MAX_INPUT_ENV, "2000000")
    assert WorkloadSettings(input_tokens=1_500_000).input_tokens == 1_500_000
    monkeypatch.setenv(MAX_OUTPUT_ENV, "64")
    with pytest.raises(ConfigError, match="--output-tokens is 65 tokens, above the limit of 64"):
        PromptSource(output_tokens=65)
    monkeypatch.setenv(MAX_OUTPUT_ENV, "lots")
    with pytest.raises(ConfigError, match=f"{MAX_OUTPUT_ENV} must be a whole number"):
        PromptSource()


def test_api_and_dataclasses_share_the_bounds():
    with pytest.raises(ConfigError, match="--input-tokens is 2,000,000 tokens"):
        WorkloadSettings(input_tokens=2_000_000)
    with pytest.raises(ConfigError, match="--input-tokens-stdev"):
        PromptSource(input_stdev=5e6)
    with pytest.raises(ConfigError, match="--min-tokens"):
        PromptSource(min_tokens=10 ** 7)
    with pytest.raises(ConfigError, match="must be a finite number"):
        PromptSource(output_stdev=float("inf"))


def test_a_dataset_row_too_long_names_its_line(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "fine"}\n' + json.dumps({"prompt": "x" * 4_000_008}) + "\n")
    with pytest.raises(ConfigError, match=rf"^{data}:2: the prompt is 1,000,002 tokens"):
        load_dataset(data)
    data.write_text('{"prompt": "fine", "max_tokens": 1000001}\n')
    with pytest.raises(ConfigError, match=rf"^{data}:1: max_tokens is 1,000,001 tokens"):
        load_dataset(data)


@pytest.mark.parametrize("row, message", [
    ('{"timestamp": 1e308, "input_length": 5, "output_length": 5}', "timestamp must be"),
    ('{"timestamp": NaN, "input_length": 5, "output_length": 5}', "not valid JSON"),
    ('{"timestamp": 0, "input_length": 2000000, "output_length": 5}', "input_length is"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2000000}', "output_length is"),
])
def test_a_trace_row_out_of_bounds_is_file_line_before_any_load(tmp_path, row, message):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 5}\n' + row + "\n")
    with pytest.raises(ConfigError, match=rf"^{trace}:2: {message}"):
        load_trace(trace)
    assert_one_error(invoke("run", "--target", NOWHERE, "--trace", str(trace)), f"{trace}:2:")


@pytest.mark.parametrize("option", ["--dataset", "--prompts"])
def test_invalid_utf8_names_the_line(tmp_path, option):
    data = tmp_path / "d.jsonl"
    data.write_bytes(b'{"prompt": "one"}\n{"prompt": "two"}\n{"prompt": "th\xffree"}\n')
    assert_one_error(invoke("run", "--target", NOWHERE, option, str(data)),
                     f"{data}:3: not UTF-8 text")


# -- item 8: scenario files ----------------------------------------------------------------

def _scenario(tmp_path: Path, old: str, new: str) -> Path:
    text = DEMO.read_text()
    assert old in text
    path = tmp_path / "s.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("old, new, line, message", [
    ("name: demo-simulated", "name: demo\x00simulated", 11, "character #x0000 is not allowed"),
    ("http://127.0.0.1:8001", "http://" + "a" * 64 + ".example.com:8001", 33,
     "host name label of 64 characters"),
    ("input_tokens: 64", "input_tokens: 64\n  prompts: " + "p" * 10_000_000, 24,
     "request.prompts is 10,000,000 characters long; at most 4,096"),
])
def test_hostile_scenario_files_are_one_error_line(tmp_path, old, new, line, message):
    path = _scenario(tmp_path, old, new)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert [p.line for p in caught.value.problems] == [line]
    assert message in caught.value.problems[0].message
    assert len(caught.value.problems[0].message) < 300  # the 10 MB value is not echoed
    result = invoke("scenario", "run", str(path), "--simulate", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output[:500]
    errors = [x for x in result.output.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and len(result.output) < 2000


def test_a_10mb_scenario_path_is_one_short_line():
    result = invoke("scenario", "validate", "s" * 10_000_000)
    assert_one_error(result, "scenario path is 10,000,000 characters long")
    assert len(result.output) < 200


def test_a_target_host_label_over_63_characters_is_refused():
    assert_one_error(invoke("run", "--target", f"http://{'h' * 64}.example:8000"),
                     "host name label of 64 characters")
