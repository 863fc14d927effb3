"""The MCP server gives a client only what it was given at start (issue 16, items 4-7; and
issue 17: every tool rejects unknown arguments).

A hostile client (a model following instructions from a web page) tries to read files
outside the server's directories, send the server's secrets to a target of its choosing,
reach an HTTP server through a rebinding host name, and crash tools with huge or
non-finite inputs. Each attempt is refused in one line; nothing is read, sent or written.
The SDK's in-memory client talks to the server, as in tests/test_mcp_server.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from loadgen.cli.main import cli
from loadgen.mcp.arguments import check_arguments
from loadgen.mcp.confine import target_key
from loadgen.mcp.http import http_app
from loadgen.mcp.options import ServerOptions
from loadgen.mcp.server import build_server
from tests.helpers.aws_env import isolate_aws
from tests.helpers.mcp_session import call, call_error, poll_until_ended, session

SHADOW = ("root:$6$saltsalt$SECRETHASHVALUE0123456789:19000:0:99999:7:::\n"
          "token: ${SECRETHASH_VARIABLE}\n")
SCENARIO = """\
name: small
hardware: {instance_type: test-box, price_per_hour: 2.0}
measurements:
  single_stream: {requests: -2, output_tokens: 8}
  fixed_length: {enabled: false}
  sweep: {enabled: false}
  fidelity: {enabled: false}
phases:
  - {label: a, checkpoint: a, target: "http://127.0.0.1:9"}
"""
RUN_ID = "20260101-000000.000-abcd"
MB = 1024 * 1024


@pytest.fixture
def dirs(tmp_path):
    """work/ (the --workdir), scenarios/ (an --allow-read dir), outside/ (neither)."""
    for name in ("work", "scenarios", "outside"):
        (tmp_path / name).mkdir()
    (tmp_path / "outside" / "shadow").write_text(SHADOW)
    return tmp_path


def server(dirs: Path, **given) -> ServerOptions:
    given.setdefault("allow_read", (dirs / "scenarios",))
    return ServerOptions(workdir=dirs / "work", **given)


def one_line_error(text: str) -> str:
    assert "\n" not in text and "Traceback" not in text and "internal error" not in text, text
    return text


# -- 4. paths: inside --workdir or --allow-read, regular files, size caps -----------------
def test_paths_outside_the_allowed_directories_are_refused_naming_the_flag(dirs):
    shadow = dirs / "outside" / "shadow"
    (dirs / "scenarios" / "link.yaml").symlink_to(shadow)
    (dirs / "work" / "results.json").write_text(json.dumps({"levels": []}))

    async def body(client):
        return [await call_error(client, "validate_scenario", file=str(shadow)),
                await call_error(client, "validate_scenario", file=str(dirs / "scenarios"
                                                                      / "link.yaml")),
                await call_error(client, "run_scenario", file=str(shadow), simulate=True),
                await call_error(client, "compare_runs", a=str(shadow),
                                 b=str(dirs / "work" / "results.json")),
                await call_error(client, "get_report", dir=str(dirs / "outside")),
                await call_error(client, "deployment_facts", log_file="/dev/zero"),
                await call_error(client, "validate_scenario", file="../outside/shadow")]

    errors = session(server(dirs), body)
    for text in errors:
        one_line_error(text)
        assert "outside the directories this server may read" in text, text
        assert "--allow-read DIR" in text and "SECRETHASH" not in text
    assert not (dirs / "outside" / "report.md").exists()  # get_report wrote nothing there


def test_a_file_that_is_not_a_scenario_is_not_quoted_but_a_scenarios_problems_are(dirs):
    (dirs / "scenarios" / "shadow").write_text(SHADOW)
    (dirs / "scenarios" / "broken.yaml").write_text(SCENARIO)
    (dirs / "scenarios" / "bad-yaml.yaml").write_text("key: [unclosed SECRETHASHVALUE\n")

    async def body(client):
        return (await call(client, "validate_scenario", file=str(dirs / "scenarios/shadow"),
                           simulate=True),
                await call(client, "validate_scenario", file=str(dirs / "scenarios/bad-yaml.yaml")),
                await call_error(client, "run_scenario", file=str(dirs / "scenarios/shadow"),
                                 simulate=True),
                await call(client, "validate_scenario",
                           file=str(dirs / "scenarios/broken.yaml")))

    shadow, bad_yaml, refused, scenario = session(server(dirs), body)
    for result in (shadow, bad_yaml):
        assert result["ok"] is False and len(result["problems"]) == 1
        assert "not a loadgen scenario" in result["problems"][0]
        assert "SECRETHASH" not in json.dumps(result)
    assert "not a loadgen scenario" in one_line_error(refused) and "SECRETHASH" not in refused
    assert scenario["ok"] is False  # a scenario's own problems still come with their line
    assert any(":4:" in p and "requests" in p for p in scenario["problems"]), scenario


def test_only_regular_files_under_the_size_caps_are_read(dirs):
    allowed = dirs / "scenarios"
    os.mkfifo(allowed / "fifo.yaml")
    (allowed / "loop.yaml").symlink_to(allowed / "loop.yaml")
    with open(allowed / "huge.yaml", "wb") as handle:  # sparse: no disk used
        handle.truncate(2 * MB)
    with open(allowed / "huge.log", "wb") as handle:
        handle.truncate(201 * MB)
    with open(allowed / "huge.json", "wb") as handle:
        handle.truncate(101 * MB)

    async def body(client):
        return [await call_error(client, "deployment_facts", log_file="/dev/zero"),
                await call_error(client, "validate_scenario", file=str(allowed / "fifo.yaml")),
                await call_error(client, "validate_scenario", file=str(allowed / "huge.yaml")),
                await call_error(client, "deployment_facts", log_file=str(allowed / "huge.log")),
                await call_error(client, "compare_runs", a=str(allowed / "huge.json"),
                                 b=str(allowed / "huge.json")),
                await call_error(client, "get_report", dir=str(allowed)),
                await call_error(client, "validate_scenario", file=str(allowed / "loop.yaml"))]

    # Even with /dev allowed (a mistake), a device is not read.
    zero, fifo, scenario, log, results, report, loop = session(
        server(dirs, allow_read=(allowed, Path("/dev"))), body)
    assert "not a regular file" in one_line_error(zero)
    assert "not a regular file" in one_line_error(fifo)
    assert "over this server's limit of 1 MB" in one_line_error(scenario)
    assert "over this server's limit of 200 MB" in one_line_error(log)
    assert "over this server's limit of 100 MB" in one_line_error(results)
    assert "over this server's limit of 100 MB" in one_line_error(report)
    assert "loop.yaml: cannot resolve it" in one_line_error(loop)


def test_a_run_folder_linked_out_of_the_work_directory_is_not_read(dirs):
    elsewhere = dirs / "outside" / "run"
    elsewhere.mkdir()
    (elsewhere / "run.json").write_text(json.dumps({"run_id": RUN_ID, "kind": "load",
                                                    "state": "completed"}))
    (elsewhere / "results.json").write_text(json.dumps({"levels": [], "secret": SHADOW}))
    (dirs / "work" / "runs").mkdir()
    (dirs / "work" / "runs" / RUN_ID).symlink_to(elsewhere)

    async def body(client):
        return (await call_error(client, "get_results", run_id=RUN_ID),
                await call_error(client, "get_report", dir=RUN_ID),
                await call(client, "list_runs"))

    results, report, runs = session(server(dirs), body)
    for text in (results, report):
        assert "link out of the work directory" in one_line_error(text)
    assert runs["runs"] == []
    assert not (elsewhere / "report.md").exists()


# -- 5. what a client can make the server send ---------------------------------------------
@pytest.mark.integration  # starts a simulator
def test_api_keys_come_only_from_variables_allowed_at_start(dirs, start_sim, monkeypatch):
    secret = "sk-server-side-0123456789"
    url = start_sim(api_key=secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("BENCH_KEY", secret)
    load = {"target": url, "requests": 2, "output_tokens": 4}

    async def strict(client):
        named = await call_error(client, "start_run", api_key_env="OPENAI_API_KEY", **load)
        default = await call(client, "start_run", **load)
        return named, default, await poll_until_ended(client, default["run_id"])

    async def allowing(client):
        run = await call(client, "start_run", api_key_env="BENCH_KEY", **load)
        return await poll_until_ended(client, run["run_id"])

    named, default, without_key = session(server(dirs), strict)
    assert "--allow-env OPENAI_API_KEY" in one_line_error(named)
    assert default["request"]["api_key_env"] == ""  # by default no variable is read
    assert without_key["state"] == "failed" and without_key["completed"] == 0
    assert "no API key was sent" in without_key["error"]  # the server's key stayed home
    with_key = session(server(dirs, allow_env=("BENCH_KEY",)), allowing)
    assert with_key["state"] == "completed" and with_key["completed"] == 2


def test_targets_and_aws_endpoints_are_limited_to_what_the_server_allows(dirs, monkeypatch):
    isolate_aws(monkeypatch, dirs)
    limited = server(dirs, allow_target=("simulator", "http://127.0.0.1:*"))

    async def body(client):
        return [await call_error(client, "start_run", target="http://10.1.2.3:8000"),
                await call_error(client, "start_run", target="http://127.0.0.1:80@evil.example/"),
                await call_error(client, "deployment_facts", url="http://evil.example/metrics"),
                await call_error(client, "list_endpoints", endpoint_url="http://evil.example"),
                await call_error(client, "start_run", target="http://[::1")]

    errors = session(limited, body)
    for text in errors[:3]:
        assert "--allow-target" in one_line_error(text), text
    assert "sends them only to its own --aws-endpoint-url" in one_line_error(errors[3])
    assert "not a valid URL" in one_line_error(errors[4])
    assert target_key("http://127.0.0.1:80@evil.example/v1") == "http://evil.example:80"
    assert target_key("https://[::1]/") == "https://[::1]:443"
    assert target_key("sagemaker://bench-qat") == "sagemaker://bench-qat"


def test_a_real_scenario_run_is_held_to_the_same_allowances(dirs, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-side-0123456789")
    good = SCENARIO.replace("requests: -2", "requests: 2")
    (dirs / "scenarios" / "ok.yaml").write_text(good)
    (dirs / "scenarios" / "param.yaml").write_text(good.replace('"http://127.0.0.1:9"',
                                                                 '"${URL}"'))

    async def body(client):
        return (await call_error(client, "run_scenario", file=str(dirs / "scenarios/param.yaml"),
                                 params=["URL=http://evil.example:80"]),
                await call_error(client, "run_scenario", file=str(dirs / "scenarios/ok.yaml")))

    target, key = session(server(dirs, allow_target=("http://127.0.0.1:*",)), body)
    assert "phase a's target http://evil.example:80" in one_line_error(target)
    assert "--allow-target" in target
    assert "--allow-env OPENAI_API_KEY" in one_line_error(key)


def test_a_deploy_copies_no_server_variable_the_client_picks(dirs, monkeypatch):
    isolate_aws(monkeypatch, dirs)
    options = server(dirs, allow_deploy=True, aws_endpoint_url="http://127.0.0.1:9")

    async def body(client):
        return await call_error(client, "deploy_endpoint", name="x", image="img",
                                role="arn:aws:iam::123456789012:role/R",
                                env=["AWS_SECRET_ACCESS_KEY"], poll_interval_s=0.01)

    text = session(options, body)
    assert "--allow-env AWS_SECRET_ACCESS_KEY" in one_line_error(text)


# -- 6. HTTP: Host/Origin checks for every bind, a token off loopback ------------------------
def _statuses(app, requests: list[dict]) -> list[int]:
    """The HTTP status of an MCP initialize request with each set of headers (the app runs
    in process: nothing listens)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}}
    with TestClient(app) as client:
        return [client.post("/mcp", json=body, headers={
            "accept": "application/json, text/event-stream", **headers}).status_code
            for headers in requests]


def test_host_and_origin_are_checked_for_any_bind_and_the_token_on_every_request(tmp_path):
    loopback = http_app(build_server(ServerOptions(workdir=tmp_path / "w")), "127.0.0.2",
                        8765, None)
    assert _statuses(loopback, [{"host": "127.0.0.2:8765"}, {"host": "evil.example:8765"},
                                {"host": "127.0.0.2:8765", "origin": "http://evil.example"},
                                {"host": "localhost:8765"}]) == [200, 421, 403, 200]
    lan = http_app(build_server(ServerOptions(workdir=tmp_path / "w")), "192.0.2.1", 8765,
                   "s3cret-token")
    good = "Bearer s3cret-token"
    assert _statuses(lan, [{"host": "192.0.2.1:8765"},
                           {"host": "192.0.2.1:8765", "authorization": "Bearer wrong"},
                           {"host": "192.0.2.1:8765", "authorization": good},
                           {"host": "evil.example:8765", "authorization": good}]
                     ) == [401, 401, 200, 421]


def test_http_off_loopback_needs_a_token(monkeypatch):
    monkeypatch.delenv("LOADGEN_MCP_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["mcp", "--http", "192.0.2.1:8765"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "Error: --http on 192.0.2.1 (not a loopback address) needs --http-token TOKEN (or "
        "LOADGEN_MCP_TOKEN set): every request must then carry Authorization: Bearer TOKEN")


@pytest.mark.integration  # starts a server process
def test_a_server_on_another_loopback_address_refuses_a_rebound_host(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        port = sock.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "mcp", "--http",
                              f"127.0.0.2:{port}", "--workdir", str(tmp_path / "w")],
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # until it listens: 30 s at most (a loaded machine)
            try:
                socket.create_connection(("127.0.0.2", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        request = urllib.request.Request(f"http://127.0.0.2:{port}/mcp", data=b"{}",
                                         headers={"Host": f"rebound.example:{port}",
                                                  "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 421
    finally:
        child.terminate()
        child.wait(timeout=10)


# -- 7 and issue 17: every tool's arguments, checked in one line -----------------------------
def test_every_tool_rejects_unknown_arguments_naming_the_accepted_ones(dirs):
    async def body(client):
        tools = (await client.list_tools()).tools
        errors = {tool.name: await call_error(client, tool.name, not_an_option=1)
                  for tool in tools}
        return tools, errors, await call_error(client, "start_run", target="simulator",
                                               slo=["ttft_ms:p99<500"])

    tools, errors, slo = session(server(dirs), body)
    assert len(tools) == 18  # 14 + the four server tools
    for tool in tools:
        text = one_line_error(errors[tool.name])
        accepted = ", ".join(tool.input_schema.get("properties", {})) or "no arguments"
        assert f"unknown argument not_an_option; it takes: {accepted}" in text, text
    assert "unknown argument slo; it takes: target, " in one_line_error(slo)


def test_lengths_counts_and_numbers_are_bounded_in_one_line(dirs):
    cases = [
        ("start_run", {"target": "http://" + "a" * 3000}, "target is 3007 characters long; "
                                                           "the limit is 2048"),
        ("start_run", {"target": "simulator", "model": "m" * 2049}, "the limit is 2048"),
        ("validate_scenario", {"file": "/" + "d" * 5000}, "the limit is 4096"),
        ("start_run", {"target": "simulator", "concurrency": list(range(1, 102))},
         "concurrency has 101 entries; the limit is 100"),
        ("run_scenario", {"file": "x.yaml", "params": ["K=V"] * 101}, "the limit is 100"),
        ("start_run", {"target": "simulator", "duration_s": 1e308},
         "more than this server's run limit"),
        ("start_run", {"target": "simulator", "requests": 10**30}, "requests is out of range"),
        ("start_run", {"target": "simulator", "requests": 0}, "requests must be >= 1"),
        ("start_run", {"target": "simulator", "seed": 2**70}, "seed is out of range"),
        ("start_run", {"target": "simulator", "concurrency": ["many"]},
         "concurrency[0] must be an integer"),
        ("start_run", {"target": "simulator", "api": "grpc"}, "api must be one of chat, "
                                                             "completions"),
        ("run_status", {"run_id": RUN_ID, "wait_s": 1e308}, "wait_s must be <= 300"),
        ("deploy_endpoint", {"name": "x", "image": "i", "tags": {f"k{i}": "v" for i in
                                                                 range(101)}},
         "tags has 101 entries"),
        ("get_results", {"run_id": RUN_ID, "histograms": 1}, "histograms must be true or "
                                                               "false"),
    ]

    async def body(client):
        return [await call_error(client, tool, **arguments) for tool, arguments, _ in cases]

    errors = session(server(dirs), body)
    for (tool, _, wanted), text in zip(cases, errors):
        assert wanted in one_line_error(text), (tool, wanted, text)


def test_the_argument_check_on_values_a_client_can_send_as_raw_json():
    # NaN and Infinity are not JSON, but Python's json module (and some clients) send them;
    # the in-memory client turns them into null, so the check is tested directly here.
    schema = {"properties": {
        "rate": {"anyOf": [{"type": "array", "items": {"type": "number",
                                                       "exclusiveMinimum": 0}},
                           {"type": "null"}]},
        "duration_s": {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}]},
        "requests": {"type": "integer", "minimum": 1},
        "file": {"type": "string", "maxLength": 4096}}}
    check = lambda **arguments: check_arguments("t", schema, arguments)  # noqa: E731
    assert check(rate=[1.5, float("inf")]) == "t: rate[1] must be a finite number (got inf)"
    assert check(duration_s=float("nan")) == "t: duration_s must be a finite number (got nan)"
    assert check(rate="[2, -1]") == "t: rate[1] must be > 0 (got -1)"  # a list sent as text
    assert check(requests=True) == "t: requests must be an integer (got True)"
    assert check(requests=5.0) is None and check(rate=None) is None
    assert check(file="a\0b") == "t: file contains a NUL character"
    nested = {"$defs": {"Slo": {"type": "object", "properties": {
        "metric": {"type": "string", "maxLength": 20}, "ms": {"type": "number"}}}},
        "properties": {"slo": {"anyOf": [{"$ref": "#/$defs/Slo"}, {"type": "null"}]}}}
    assert check_arguments("t", nested, {"slo": {"metric": "ttft", "pct": 99}}) == \
        "t: slo: unknown argument pct; it takes: metric, ms"
    assert check_arguments("t", nested, {"slo": {"ms": float("inf")}}) == \
        "t: slo: ms must be a finite number (got inf)"
