"""Managed servers (issue 19): ``loadgen.servers``, ``loadgen server ...``, ``server:``
scenario phases and the MCP server tools, against our own ``mock-server`` as the
managed command (a real process, a real port, a real log).

Remote hosts are tested with an ``ssh`` stand-in on PATH (no sshd can be started here
without root-only setup): it records its arguments and runs the remote command with
``sh`` locally, in a fake home directory, exactly as ssh hands it to the remote shell.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.mcp.options import ServerOptions
from loadgen.mcp.tools_servers import mask_log_line
from loadgen.scenario.loader import check_text
from loadgen.scenario.params import Params
from loadgen.servers import (
    ServerSpec,
    ServerStartError,
    find_server,
    public_command,
    start_server,
)
from loadgen.servers.local import is_alive
from loadgen.servers.remote import SshError
from loadgen.servers.state import EXITED, FAILED, READY, STOPPED, load_state
from loadgen.vllm.facts import parse_startup_log
from tests.helpers.mcp_session import call, call_error, session

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ENV = {"PYTHONPATH": str(ROOT)}  # the managed mock-server imports this checkout
MOCK = (PY, "-m", "loadgen.cli", "mock-server", "--port", "{port}", "--model", "{model}",
        "--ttft-ms", "5", "--itl-ms", "1")
LOGS = ROOT / "tests" / "fixtures" / "vllm_logs"


def mock_spec(model: str = "tiny", **kw) -> ServerSpec:
    return ServerSpec(kw.pop("command", MOCK), model=model, port=kw.pop("port", 0), env=ENV,
                      ready_timeout_s=kw.pop("ready_timeout_s", 30), **kw)


def health(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=2) as reply:
        return reply.status


def wait_for(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# --------------------------------------------------------------------------- pure


def test_placeholders_fill_port_and_model_and_leave_other_braces():
    spec = ServerSpec(("vllm", "serve", "{model}", "--port={port}",
                       "--override-generation-config", '{"temperature": 0}'),
                      model="google/gemma-4-E2B-it", port=8123)
    assert spec.argv() == ["vllm", "serve", "google/gemma-4-E2B-it", "--port=8123",
                           "--override-generation-config", '{"temperature": 0}']
    assert spec.url() == "http://127.0.0.1:8123"
    assert ServerSpec(("x",), host="me@gpu-vm", port=9000).url() == "http://gpu-vm:9000"


@pytest.mark.parametrize("kwargs, message", [
    ({"command": ("vllm", "serve", "{model}")}, "uses {model} but no model"),
    ({"command": ()}, "command is empty"),
    ({"command": ("x",), "host": "-oProxyCommand=touch /tmp/pwned"}, "user@vm"),
    ({"command": ("x",), "host": "me@vm", "port": 0}, "remote host needs a port"),
    ({"command": ("x",), "port": 70000}, "1-65535"),
    ({"command": ("x",), "ready_timeout_s": float("nan")}, "ready timeout"),
    ({"command": ("x",), "env": {"A B": "1"}}, "not a valid name"),
])
def test_bad_specs_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        ServerSpec(**kwargs)


def test_secret_option_values_are_masked_in_the_recorded_command():
    argv = ["vllm", "serve", "m", "--api-key", "sk-123", "--hf-token=hf_abc", "--max-tokens", "9"]
    assert public_command(argv) == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***",
                                    "--max-tokens", "9"]
    assert mask_log_line("non-default args: {'api_key': 'sk-123', 'model': 'm'}") == \
        "non-default args: {'api_key': '***', 'model': 'm'}"


def test_facts_of_the_real_vllm_cpu_log_and_a_quantized_checkpoint():
    cpu = parse_startup_log((LOGS / "vllm-0.32.0-cpu.log").read_text().splitlines())
    assert (cpu.vllm_version, cpu.model, cpu.dtype, cpu.max_model_len) == \
        ("0.32.0", "/work/stage/tiny-llama", "float32", 1024)
    assert (cpu.kv_cache_tokens, cpu.max_concurrency, cpu.engine_init_s) == (1_048_576, 1024.0, 72.53)
    assert cpu.kv_cache_gib == 1.0  # "Explicitly set (1.0/9.96) GiB for KV cache on node 0"
    assert cpu.quantization is None and cpu.cuda_graph_s is None  # CPU: no CUDA graphs
    qat = parse_startup_log((LOGS / "vllm-0.33.0.log").read_text().splitlines())
    assert qat.quantization == "compressed-tensors"
    gpu = parse_startup_log((LOGS / "vllm-0.8.5.log").read_text().splitlines())
    assert (gpu.cuda_graph_s, gpu.cuda_graph_gib) == (26.0, 0.53)


SCENARIO = """\
name: managed
hardware: {instance_type: local}
measurements: {single_stream: {requests: 1, output_tokens: 4, warmup: 0}}
phases:
  - {label: a, checkpoint: a, server: {command: [vllm, serve, '{model}'], host: '-oX=y'}}
  - label: b
    checkpoint: b
    model: m
    target: http://127.0.0.1:1
    server: {command: "vllm serve {model}", port: 70000, keep_running: maybe}
  - {label: c, checkpoint: c}
"""


def test_scenario_server_blocks_report_every_problem_with_its_line():
    checked = check_text(SCENARIO, "s.yaml", Params({}, {}))
    found = [p.format("s.yaml") for p in checked.problems]
    assert checked.scenario is None
    assert "s.yaml:5: phases[0].server: the server command uses {model} but no model is given" in found
    assert "s.yaml:5: phases[0].server: host must look like user@vm or vm, got '-oX=y'" in found
    assert any(f.startswith("s.yaml:10: phases[1]: give one of target") for f in found)
    assert any(f.startswith("s.yaml:10: phases[1].server.port must be 1-65535") for f in found)
    assert any(f.startswith("s.yaml:10: phases[1].server.keep_running must be true or false")
               for f in found)
    assert "s.yaml:11: phases[2]: missing target, deploy or server: say which server this " \
           "phase measures" in found


def test_mcp_server_tools_are_refused_without_allow_deploy(tmp_path):
    async def body(client):
        return [await call_error(client, "start_server", name="x", command=list(MOCK)),
                await call_error(client, "server_status"),
                await call_error(client, "stop_server", name="x"),
                await call_error(client, "server_logs", name="x")]

    texts = session(ServerOptions(workdir=tmp_path, allowed_server_commands=(PY,)), body)
    for tool, text in zip(("start_server", "server_status", "stop_server", "server_logs"), texts):
        assert f"refused: {tool}" in text and "--allow-deploy" in text, text
    assert not (tmp_path / "servers").exists()  # nothing was started


def test_mcp_start_server_runs_only_allowed_command_prefixes(tmp_path):
    options = ServerOptions(workdir=tmp_path, allow_deploy=True,
                            allowed_server_commands=("vllm serve",))

    async def body(client):
        return [await call_error(client, "start_server", name="x", command=[PY, "-c", "1"]),
                await call_error(client, "start_server", name="x", command=["vllm", "bench"]),
                await call_error(client, "start_server", name="x",
                                 command=["/tmp/evil/vllm", "serve"]),
                await call_error(client, "start_server", name="x", command=["vllm", "serve"],
                                 host="me@elsewhere")]

    texts = session(options, body)
    assert all("is not allowed on this server" in t for t in texts), texts
    assert not (tmp_path / "servers").exists()


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.integration
def test_start_ready_log_and_stop(tmp_path):
    run_dir = tmp_path / "srv"
    with start_server(mock_spec(), run_dir) as server:
        state = load_state(run_dir)
        assert state.status == READY and state.pid == server.state.pid
        assert state.time_to_ready_s is not None and state.time_to_ready_s > 0
        assert health(server.url) == 200
        assert "loadgen mock-server: model tiny at " + server.url in \
            (run_dir / "server.log").read_text()
        pid, ticks = state.pid, state.start_ticks
        assert is_alive(pid, ticks)
    stopped = load_state(run_dir)
    assert stopped.status == STOPPED and stopped.stop["signal"] == "SIGTERM"
    assert not is_alive(pid, ticks)
    with pytest.raises(OSError):
        health(server.url)


def test_a_log_that_is_a_link_is_never_written_through(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "server.log").symlink_to(victim)
    with pytest.raises(ConfigError, match="not a regular file"):
        start_server(mock_spec(), tmp_path / "srv")
    assert victim.read_text() == "keep me"


@pytest.mark.integration
def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    code = ("import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "from loadgen.cli.main import cli; cli(sys.argv[1:], prog_name='loadgen')")
    stubborn = (PY, "-c", code, *MOCK[3:])
    server = start_server(mock_spec(command=stubborn), tmp_path / "srv")
    state = server.stop(grace_s=0.5)
    assert state.status == STOPPED and state.stop["signal"] == "SIGKILL"
    assert state.stop["seconds"] >= 0.5 and not server.alive()


@pytest.mark.integration
def test_a_crash_during_start_is_one_line_with_the_log_tail(tmp_path):
    code = "import sys; print('loading...'); print('RuntimeError: no GPU', flush=True); sys.exit(4)"
    crash = (PY, "-c", code)
    with pytest.raises(ServerStartError) as caught:
        start_server(mock_spec(command=crash), tmp_path / "srv")
    message = str(caught.value)
    assert "\n" not in message and "exited (exit code 4)" in message
    assert message.endswith("ends: RuntimeError: no GPU")
    assert caught.value.tail == ["loading...", "RuntimeError: no GPU"]
    state = load_state(tmp_path / "srv")
    assert (state.status, state.exit_code) == (EXITED, 4)


# A server that is up at once but never lists the wanted model (starts in ~50 ms, unlike
# mock-server, so the reason in the timeout's message does not depend on the machine's load).
WRONG_MODEL = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "other-model"}]}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.integration
def test_ready_timeout_stops_the_server(tmp_path):
    spec = mock_spec(command=(PY, "-c", WRONG_MODEL, "{port}"), ready_timeout_s=1.5)
    with pytest.raises(ServerStartError, match=r"not ready within 1.5 s \(/v1/models lists "
                                               r"other-model, not tiny\); it was stopped"):
        start_server(spec, tmp_path / "srv")
    state = load_state(tmp_path / "srv")
    assert state.status == FAILED and not is_alive(state.pid, state.start_ticks)


@pytest.mark.integration
def test_sigkill_of_loadgen_leaves_the_server_and_server_stop_finds_it(tmp_path):
    run_dir = tmp_path / "srv"
    # Never ready (it serves another model), so loadgen is still waiting when it is killed.
    starter = subprocess.Popen(
        [PY, "-m", "loadgen.cli", "server", "start", "--dir", str(run_dir), "--model", "wanted",
         "--port", "0", "--", *MOCK[:7], "other"],
        env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: "loadgen mock-server: model other" in
                 (run_dir / "server.log").read_text() if (run_dir / "server.log").exists() else False)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
    finally:
        starter.kill()
        starter.communicate()
    state = load_state(run_dir)
    assert state.status == "starting" and is_alive(state.pid, state.start_ticks)
    assert health(state.url) == 200  # the orphan still serves

    def loadgen(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "loadgen.cli", "server", *args, "--dir", str(run_dir)],
                              env={**os.environ, **ENV}, capture_output=True, text=True,
                              timeout=60)

    status = loadgen("status")
    assert status.returncode == 0 and f"(pid {state.pid}), never seen ready" in status.stdout
    stop = loadgen("stop", "--stop-grace", "5")
    assert stop.returncode == 0 and stop.stdout.startswith(f"stopped (pid {state.pid}) by SIGTERM")
    assert not is_alive(state.pid, state.start_ticks)
    after = loadgen("status")
    assert after.returncode == 3 and after.stdout.startswith("not running (stopped by SIGTERM")
    assert loadgen("stop").stdout.startswith("not running")


# --------------------------------------------------------------------------- ssh hosts

FAKE_SSH = """\
#!/bin/sh
# ssh stand-in: records its arguments, then runs the remote command with sh in a fake home.
echo "$@" >> "$FAKE_SSH_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    -o) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
case "$host" in denied@*) echo "$host: Permission denied (publickey)." >&2; exit 255 ;; esac
cd "$FAKE_SSH_HOME" || exit 255
exec sh -c "$*"
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    bin_dir, home = tmp_path / "bin", tmp_path / "remote-home"
    bin_dir.mkdir()
    home.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_HOME", str(home))
    monkeypatch.setenv("FAKE_SSH_LOG", str(tmp_path / "ssh-calls.log"))
    return home, tmp_path / "ssh-calls.log"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.integration
def test_remote_server_over_ssh_starts_tails_and_stops(tmp_path, fake_ssh):
    home, calls = fake_ssh
    run_dir = tmp_path / "srv"
    start_server(mock_spec(host="tester@127.0.0.1", port=free_port()), run_dir)
    try:
        state = load_state(run_dir)
        assert state.status == READY and state.host == "tester@127.0.0.1"
        remote_log = home / state.remote_dir / "server.log"
        assert "loadgen mock-server: model tiny" in remote_log.read_text()
        assert (run_dir / "server.log").read_text() == remote_log.read_text()  # copied back
        assert find_server(run_dir).tail(5)[-1].startswith("loadgen mock-server: model tiny")
        assert find_server(run_dir).alive()
    finally:
        stopped = find_server(run_dir).stop(grace_s=5)
    assert stopped.status == STOPPED and stopped.stop["signal"] == "SIGTERM"
    assert not find_server(run_dir).alive()
    recorded = calls.read_text().splitlines()
    assert recorded and all(line.startswith("-o BatchMode=yes -o ConnectTimeout=15 -- "
                                            "tester@127.0.0.1 sh -c ") for line in recorded)


@pytest.mark.integration
def test_ssh_auth_failure_is_one_line_and_fast(tmp_path, fake_ssh):
    with pytest.raises(SshError) as caught:
        start_server(mock_spec(host="denied@127.0.0.1", port=8000), tmp_path / "srv")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("ssh denied@127.0.0.1 failed: denied@127.0.0.1: Permission "
                              "denied (publickey).")
    assert "batch mode" in message and "ssh denied@127.0.0.1 true" in message


# --------------------------------------------------------------------------- scenario and MCP

ABA = """\
name: managed-aba
hardware: {instance_type: local, price_per_hour: 1.0}
request: {input_tokens: 16}
measurements:
  single_stream: {requests: 2, output_tokens: 6, warmup: 0}
  fixed_length: {enabled: false}
  sweep: {enabled: false}
  fidelity: {enabled: false}
phases:
  - label: a1
    checkpoint: a
    model: model-a
    server: &a
      command: [@PY@, -m, loadgen.cli, mock-server, --port, '{port}', --model, '{model}',
                --itl-ms, '1']
      env: {PYTHONPATH: '@ROOT@'}
      port: 0
      ready_timeout: 60
      keep_running: true
  - label: b
    checkpoint: b
    model: model-b
    server: {command: "@PY@ -m loadgen.cli mock-server --port {port} --model {model} --itl-ms 0.5",
             env: {PYTHONPATH: '@ROOT@'}, port: 0, ready_timeout: 60}
  - {label: a2, checkpoint: a, model: model-a, server: *a}
"""


@pytest.mark.integration
def test_scenario_with_server_phases_runs_a_b_a(tmp_path):
    from loadgen.scenario import RunOptions, load_scenario, run_scenario

    text = ABA.replace("@PY@", PY).replace("@ROOT@", str(ROOT))
    path = tmp_path / "aba.yaml"
    path.write_text(text)
    scenario = load_scenario(path)
    lines: list[str] = []
    run = asyncio.run(run_scenario(scenario, RunOptions(tmp_path / "out"), log=lines.append))
    assert [o.status for o in run.outcomes] == ["complete"] * 3, lines
    phases = {label: json.loads((tmp_path / "out" / f"phase-{label}.json").read_text())
              for label in ("a1", "b", "a2")}
    a1, b, a2 = (phases[k]["server"] for k in ("a1", "b", "a2"))
    assert a1["time_to_ready_s"] > 0 and b["time_to_ready_s"] > 0
    assert (a1["server_reused"], b["server_reused"], a2["server_reused"]) == (False, False, True)
    assert a2["server_url"] == a1["server_url"] != b["server_url"]
    assert b["server_stop"]["signal"] == "SIGTERM"
    assert phases["a2"]["measurements"]["single_stream"]["requests"]["completed"] == 2
    for label in ("a1", "b"):  # every server is stopped when the run ends
        state = load_state(tmp_path / "out" / "servers" / label)
        assert state.status == STOPPED and not is_alive(state.pid, state.start_ticks)
    assert any("reusing the a server" in line for line in lines)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "ready after s" in report and "(reused)" in report


@pytest.mark.integration
def test_mcp_start_status_logs_stop(tmp_path):
    options = ServerOptions(workdir=tmp_path, allow_deploy=True,
                            allowed_server_commands=(f"{PY} -m loadgen.cli mock-server",))

    async def body(client):
        started = await call(client, "start_server", name="tiny", command=list(MOCK),
                             model="tiny", port=0, env=ENV, ready_timeout_s=30)
        listed = await call(client, "server_status")
        logs = await call(client, "server_logs", name="tiny", lines=1)
        stopped = await call(client, "stop_server", name="tiny", stop_grace_s=5)
        return started, listed, logs, stopped

    started, listed, logs, stopped = session(options, body)
    assert started["status"] == "ready" and started["alive"] and started["time_to_ready_s"] > 0
    assert [s["name"] for s in listed["servers"]] == ["tiny"] and listed["servers"][0]["alive"]
    assert len(logs["lines"]) == 1 and logs["lines"][0].startswith("loadgen mock-server: model tiny")
    assert stopped["status"] == "stopped" and not stopped["alive"]
