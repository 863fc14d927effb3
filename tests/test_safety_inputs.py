"""Hostile inputs (issue 16, items 8-10): bounded token counts and files, checked before any
load; a preflight that keeps its timeouts; an API key echoed by a server never stored."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import orjson
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
from tests.helpers.raw_http_server import RawServer, Script, chunked, sse_head

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
    ("input_tokens: 64", "input_tokens: 64\n  prompts: " + "p" * 5_000, 24,
     "request.prompts is 5,000 characters long; at most 4,096"),
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


def test_a_scenario_file_with_a_10mb_path_is_one_short_line(tmp_path):
    path = _scenario(tmp_path, "input_tokens: 64", "input_tokens: 64\n  prompts: " +
                     "p" * 10_000_000)
    result = invoke("scenario", "run", str(path), "--simulate", "--out", str(tmp_path / "o"))
    assert_one_error(result, f"{path} is 10,00", "scenario files are at most 1,048,576 bytes")


def test_a_10mb_scenario_path_is_one_short_line():
    result = invoke("scenario", "validate", "s" * 10_000_000)
    assert_one_error(result, "scenario path is 10,000,000 characters long")
    assert len(result.output) < 200


def test_a_target_host_label_over_63_characters_is_refused():
    assert_one_error(invoke("run", "--target", f"http://{'h' * 64}.example:8000"),
                     "host name label of 64 characters")


# -- item 9: the preflight keeps its timeouts and says what went wrong -------------------

SSE_OK = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
          b'data: [DONE]\n\n')


def ok_script() -> Script:
    return Script((sse_head("chunked"), chunked([SSE_OK])))


@pytest.fixture
def silent_listener():
    """A socket that listens and never accepts: TCP connects (the kernel's backlog), no
    HTTP ever answers. ``filled()`` fills its backlog, so the next connect hangs instead."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    waiting: list[socket.socket] = []

    def filled() -> None:
        client = socket.create_connection(sock.getsockname(), timeout=5)
        waiting.append(client)

    yield sock.getsockname()[1], filled
    for client in waiting:
        client.close()
    sock.close()


@pytest.mark.integration
def test_preflight_of_a_silent_server_keeps_to_timeout_and_says_so(silent_listener):
    port, _ = silent_listener
    result = invoke("run", "--target", f"http://127.0.0.1:{port}", "--timeout", "1",
                    "--requests", "1")
    assert_one_error(result, "connected but got no answer within 1 s (--timeout)")


@pytest.mark.integration
def test_preflight_of_a_black_hole_keeps_to_connect_timeout_and_says_so(silent_listener):
    port, fill = silent_listener
    fill()  # the backlog is full: the kernel drops the next SYNs
    result = invoke("run", "--target", f"http://127.0.0.1:{port}", "--connect-timeout", "0.5",
                    "--requests", "1")
    assert_one_error(result, "timed out after 0.5 s (--connect-timeout)")


@pytest.mark.integration
def test_no_v1_models_is_a_warning_when_model_is_given(tmp_path):
    not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    with RawServer(models_reply=not_found) as server:
        server.script(*[ok_script() for _ in range(6)])  # a closed loop may send one more
        refused = invoke("run", "--target", server.url, "--requests", "1", "--warmup", "0")
        assert_one_error(refused, "HTTP 404", "give --model")
        out = tmp_path / "r.json"
        result = invoke("run", "--target", server.url, "--model", "gw-model", "--requests", "2",
                        "--warmup", "0", "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert [x for x in result.output.splitlines() if "/v1/models" in x] == [
        f"warning: GET {server.url}/v1/models returned HTTP 404 (a gateway without it?); "
        "sending to model 'gw-model' as --model says"]
    data = json.loads(out.read_text())
    assert data["levels"][0]["requests"]["completed"] == 2
    assert data["target"]["model"] == "gw-model" and len(data["target"]["warnings"]) == 1


@pytest.mark.integration
def test_oversized_response_headers_say_so_in_the_preflight():
    huge = (b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 100_000 +
            b"\r\nContent-Length: 2\r\n\r\n{}")
    with RawServer(models_reply=huge) as server:
        result = invoke("run", "--target", server.url, "--requests", "1")
    assert_one_error(result, "response headers are too large")


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["stream", "aiohttp"])
def test_oversized_headers_and_redirects_of_requests_are_recorded(tmp_path, transport):
    huge = Script((b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * 70_000 + b"\r\n",
                   b"Content-Length: 0\r\n\r\n"), close=True)
    moved = Script((b"HTTP/1.1 301 Moved Permanently\r\nLocation: http://127.0.0.1:1/v1/"
                    b"chat/completions\r\nContent-Length: 0\r\n\r\n",))
    out = tmp_path / "r.json"
    with RawServer() as server:
        server.script(moved, huge, moved, moved)  # a closed loop may send one more
        result = invoke("run", "--target", server.url, "--requests", "2", "--warmup", "0",
                        "--transport", transport, "--quiet", "--out", str(out))
    assert result.exit_code == 3, result.output  # every request failed
    messages = json.loads(out.read_text())["levels"][0]["requests"]["error_messages"]
    assert messages["http_301"] == ["redirected to Location: http://127.0.0.1:1/v1/chat/"
                                    "completions (not followed; point --target there)"]
    assert "response headers too large" in messages["bad_response"][0]


# -- item 10: a key echoed back is never stored -------------------------------------------

@pytest.mark.integration
def test_an_api_key_echoed_in_an_error_body_is_redacted_everywhere(tmp_path, monkeypatch):
    key = "sk-live-Zq81x0P4-secret"
    monkeypatch.setenv("LOADGEN_TEST_KEY", key)
    echo = orjson.dumps({"error": {"message": f"invalid key '{key}' (Bearer {key})"}})
    bad = Script((b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(echo), echo),))
    out, saved = tmp_path / "r.json", tmp_path / "req.jsonl"
    with RawServer() as server:
        server.script(bad, bad)
        result = invoke("run", "--target", server.url, "--api-key-env", "LOADGEN_TEST_KEY",
                        "--requests", "2", "--warmup", "0", "--quiet", "--out", str(out),
                        "--save-requests", str(saved))
    assert result.exit_code == 3, result.output
    assert key not in result.output
    for path in (out, saved):
        assert key not in path.read_text()
    messages = json.loads(out.read_text())["levels"][0]["requests"]["error_messages"]
    assert messages["http_400"] == ["invalid key '***' (Bearer ***)"]
    assert "Bearer ***" in saved.read_text().splitlines()[0]


def test_redact_values_hides_every_occurrence_longest_first():
    from loadgen.redact import redact_values

    assert redact_values("a KEY1 b KEY1KEY2 c", ["KEY1", "KEY1KEY2", None, ""]) == \
        "a *** b *** c"


def test_scenario_token_counts_have_the_same_bounds(tmp_path):
    path = _scenario(tmp_path, "sweep: {concurrency: [1, 4, 16], requests_per_stream: 2, "
                     "output_tokens: 128}", "sweep: {concurrency: [1, 4, 16], "
                     "requests_per_stream: 2, output_tokens: 2000000}")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert [p.message for p in caught.value.problems] == [
        "measurements.sweep.output_tokens is 2,000,000 tokens, above the limit of 1,000,000 "
        f"(set {MAX_OUTPUT_ENV} to allow more)"]
