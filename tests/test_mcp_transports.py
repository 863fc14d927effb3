"""``loadgen mcp`` as a process: over stdio (what desktop clients launch) and streamable
HTTP, with the SDK's own clients; and the one-line hint when the SDK is missing."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from mcp import StdioServerParameters

from loadgen.cli.main import cli
from loadgen.mcp.options import parse_http_address
from tests.helpers.mcp_session import call, session

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

LOADGEN = [sys.executable, "-m", "loadgen.cli"]


def test_stdio_subprocess_runs_a_sweep_against_the_simulator(tmp_path, sim_url):
    server = StdioServerParameters(command=sys.executable,
                                   args=[*LOADGEN[1:], "mcp", "--workdir", str(tmp_path / "w")])

    async def body(client):
        tools = await client.list_tools()
        started = await call(client, "start_run", target=sim_url, concurrency=[1, 2],
                             requests=3, output_tokens=8)
        status = await call(client, "run_status", run_id=started["run_id"], wait_s=60)
        results = await call(client, "get_results", run_id=started["run_id"])
        return tools, status, results

    tools, status, results = session(server, body)
    assert len(tools.tools) == 18  # 14 + the four server tools
    assert status["state"] == "completed" and status["completed"] == 6
    assert [lv["requests"]["completed"] for lv in results["levels"]] == [3, 3]
    assert (tmp_path / "w" / "runs" / status["run_id"] / "results.json").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_on_127_0_0_1_by_default(tmp_path):
    port = _free_port()
    child = subprocess.Popen([*LOADGEN, "mcp", "--http", str(port), "--workdir",
                              str(tmp_path / "w")], stderr=subprocess.PIPE, text=True)
    try:
        banner = child.stderr.readline()
        assert f"serving http://127.0.0.1:{port}/mcp" in banner and "WARNING" not in banner
        for _ in range(100):  # until it listens: 10 s at most
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        tools = session(f"http://127.0.0.1:{port}/mcp", lambda client: client.list_tools())
        assert "start_run" in {tool.name for tool in tools.tools}
    finally:
        child.terminate()
        child.wait(timeout=10)


def test_http_addresses():
    assert parse_http_address("8765") == ("127.0.0.1", 8765)
    assert parse_http_address(":8765") == ("127.0.0.1", 8765)
    assert parse_http_address("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_http_address("[::1]:9000") == ("::1", 9000)
    result = CliRunner().invoke(cli, ["mcp", "--http", "localhost"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("Error: --http takes HOST:PORT or PORT, e.g. "
                                     "127.0.0.1:8765 (got 'localhost')")


def test_without_the_sdk_it_says_in_one_line_how_to_install_it(monkeypatch):
    for name in [m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "loadgen.mcp.s",
                                                                          "loadgen.mcp.tools"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if not installed
    result = CliRunner().invoke(cli, ["mcp"])
    assert result.exit_code == 2
    assert result.stderr == "Error: loadgen mcp needs the MCP SDK: pip install 'loadgen[mcp]'\n"
