"""The command line under stress: signals, bad output paths, an open loop that falls behind,
a stalled preflight, runs where everything fails. Signals need a real process: these tests
run ``python -m loadgen.cli`` against a simulator on 127.0.0.1 and wait for what it prints,
never for a fixed time."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.simulator import SimProfile

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

SLOW = SimProfile(ttft_s=0.01, itl_s=0.05)  # 40 tokens take ~2 s: levels that can be stopped


def start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "loadgen.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_for_line(stream, fragment: str) -> list[str]:
    """Read ``stream`` until a line contains ``fragment``; return the lines read."""
    lines = []
    for line in stream:
        lines.append(line)
        if fragment in line:
            return lines
    raise AssertionError(f"{fragment!r} never printed; got {lines}")


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    stdout, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr
    return stdout, stderr


def requests_received(start_sim) -> int:
    """Requests the last simulator started has received, read in this process: no HTTP
    request that would queue behind the load it is measuring."""
    return start_sim.threads[-1].simulator.state.requests_received


def wait_until_received(start_sim, count: int, proc: subprocess.Popen,
                        within_s: float = 60.0) -> None:
    """The load is running: the simulator has received ``count`` requests from ``proc``.
    Bounded in time; fails at once (with the CLI's stderr) if the CLI has already exited."""
    deadline = time.monotonic() + within_s
    while requests_received(start_sim) < count:
        if proc.poll() is not None:
            raise AssertionError(f"the CLI exited ({proc.returncode}) before sending {count} "
                                 f"requests: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{requests_received(start_sim)} of {count} requests arrived "
                                 f"in {within_s:.0f} s")
        time.sleep(0.01)


def test_sigterm_between_levels_stops_like_ctrl_c(start_sim, tmp_path):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.01))
    out = tmp_path / "r.json"
    proc = start_cli("sweep", "--target", url, "--concurrency", "1,2", "--duration", "2",
                     "--graceful-stop", "0", "--output-tokens", "4", "--out", str(out))
    wait_for_line(proc.stderr, "[1/2]")
    # Written between levels: level 1 is in, and the file says the run is not complete.
    between = json.loads(out.read_text())
    assert between["partial"] is True and between["finished_at"] is None
    assert len(between["levels"]) == 1
    proc.send_signal(signal.SIGTERM)
    _, stderr = finish(proc)
    assert proc.returncode == 143, stderr
    assert "SIGTERM: stopping" in stderr
    data = json.loads(out.read_text())
    assert data["partial"] is True and 1 <= len(data["levels"]) <= 2


def test_sigterm_in_the_first_level_still_writes_a_file(start_sim, tmp_path):
    url = start_sim(SLOW)
    out = tmp_path / "r.json"
    proc = start_cli("sweep", "--target", url, "--concurrency", "2,4", "--requests", "100",
                     "--output-tokens", "40", "--out", str(out))
    wait_for_line(proc.stdout, "model=")  # the header: the load starts now
    wait_until_received(start_sim, 2, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = finish(proc)
    assert proc.returncode == 143, stderr
    data = json.loads(out.read_text())
    assert data["partial"] is True and len(data["levels"]) == 1
    assert data["levels"][0]["partial"] is True
    assert data["levels"][0]["requests"]["incomplete"] == 2


def test_two_fast_ctrl_c_still_write_what_was_measured(start_sim, tmp_path):
    url = start_sim(SLOW)
    out = tmp_path / "r.json"
    proc = start_cli("run", "--target", url, "--concurrency", "2", "--requests", "100",
                     "--output-tokens", "40", "--out", str(out))
    wait_for_line(proc.stdout, "model=")
    wait_until_received(start_sim, 2, proc)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, stderr = finish(proc)
    assert proc.returncode == 130, stderr
    assert "Aborted" not in stderr
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["levels"][0]["requests"]["incomplete"] == 2


def test_open_loop_far_behind_schedule_stops_on_time_under_the_cap(start_sim, tmp_path):
    """Due 100,000 requests/s with 4 in flight: it sends what the cap allows, drops the rest."""
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.001))
    out = tmp_path / "r.json"
    proc = start_cli("run", "--target", url, "--rate", "100000", "--duration", "1",
                     "--max-in-flight", "4", "--output-tokens", "4", "--graceful-stop", "5",
                     "--out", str(out), "--quiet")
    _, stderr = finish(proc)
    assert proc.returncode == 0, stderr
    req = json.loads(out.read_text())["levels"][0]["requests"]
    assert req["completed"] > 0 and req["dropped"] > req["completed"]
    assert requests_received(start_sim) == req["completed"] + req["failed"] + req["incomplete"]


def test_open_loop_far_behind_schedule_answers_ctrl_c(start_sim, tmp_path):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.001))
    out = tmp_path / "r.json"
    proc = start_cli("run", "--target", url, "--rate", "100000", "--duration", "600",
                     "--output-tokens", "4", "--out", str(out))
    wait_for_line(proc.stdout, "model=")
    wait_until_received(start_sim, 10, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = finish(proc)
    assert proc.returncode == 130, stderr
    assert json.loads(out.read_text())["levels"][0]["requests"]["completed"] >= 0


def test_ctrl_c_during_a_stalled_preflight_stops_at_once(tmp_path):
    """A server that accepts connections and never answers: Ctrl-C must not wait 30 s."""
    connected = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(30)
        port = server.getsockname()[1]

        def accept() -> None:
            conn, _ = server.accept()
            connected.set()
            conn.recv(65536)  # the GET /v1/models, never answered; closed with the server

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        proc = start_cli("run", "--target", f"http://127.0.0.1:{port}", "--requests", "1",
                         "--out", str(tmp_path / "r.json"))
        assert connected.wait(30)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=10)  # well under the 30 s preflight timeout
    assert proc.returncode == 130, stderr
    assert "stopped before any load was sent" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "r.json").exists()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def test_unwritable_out_is_refused_before_any_load(start_sim, tmp_path):
    url = start_sim()
    (tmp_path / "file").write_text("")
    for out, fragment in [(tmp_path / "file" / "r.json", "is a file, not a directory"),
                          (tmp_path, "is a directory")]:
        line = one_line_error(invoke("run", "--target", url, "--requests", "2",
                                     "--out", str(out)))
        assert fragment in line and "--out" in line
    assert requests_received(start_sim) == 0


def test_prompts_directory_is_one_line(tmp_path):
    assert "--prompts" in one_line_error(invoke("run", "--prompts", str(tmp_path)))


def test_rate_inf_is_rejected_in_one_line():
    line = one_line_error(invoke("run", "--rate", "inf", "--requests", "3"))
    assert "finite" in line and "--concurrency N --requests N" in line


def test_out_dash_writes_results_to_stdout(sim_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = start_cli("run", "--target", sim_url, "--requests", "2", "--output-tokens", "4",
                     "--out", "-")
    stdout, stderr = finish(proc)
    assert proc.returncode == 0, stderr
    data = json.loads(stdout)  # nothing else on stdout: the table went to stderr
    assert data["levels"][0]["requests"]["completed"] == 2
    assert "out tok/s" in stderr and "results: stdout" in stderr
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_all_requests_failed_exits_non_zero_and_names_the_errors(start_sim, tmp_path):
    url = start_sim(SimProfile(ttft_s=0.005, itl_s=0.001, fault_500=1.0))
    out = tmp_path / "r.json"
    result = invoke("run", "--target", url, "--requests", "3", "--output-tokens", "4",
                    "--out", str(out))
    assert result.exit_code == 3, result.output
    assert "http_500×3" in result.output  # error kinds in the table
    assert "Error: all 3 requests failed" in result.output
    level = json.loads(out.read_text())["levels"][0]
    assert level["requests"]["errors"] == {"http_500": 3}
    assert level["requests"]["error_messages"]["http_500"]  # what the server said
    first = level["requests"]["error_messages"]["http_500"][0]
    assert f"the server said: {first}" in result.output  # ... printed, not only filed


def test_non_terminal_progress_prints_the_header_first_and_a_line_per_level(sim_url, tmp_path):
    proc = start_cli("sweep", "--target", sim_url, "--concurrency", "1,2", "--requests", "2",
                     "--output-tokens", "4", "--out", str(tmp_path / "r.json"))
    stdout, stderr = finish(proc)
    assert proc.returncode == 0, stderr
    assert stdout.splitlines()[0].endswith("model=loadgen-sim")
    levels = [line for line in stderr.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in levels] == ["[1/2] concurrency 1",
                                                       "[2/2] concurrency 2"]
    assert all("2 ok, 0 failed" in line and "out tok/s" in line for line in levels)


def test_a_failing_final_write_goes_to_a_fallback_file(sim_url, tmp_path, monkeypatch):
    """--out passed the check, then its directory became unwritable mid-run: nothing is lost."""
    import asyncio

    import loadgen

    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "out"
    out = out_dir / "r.json"

    def break_out_dir(result) -> None:  # after the check, before any load
        out_dir.rmdir()
        out_dir.write_text("now a file")

    result = asyncio.run(loadgen.sweep(sim_url, loads=[loadgen.ConstantConcurrency(1)],
                                       stop=loadgen.StopRule(requests=2), out=out,
                                       prompts=loadgen.PromptSource(8, 4),
                                       on_start=break_out_dir))
    assert result.write_error and str(out) in result.write_error
    assert result.path.parent == tmp_path and result.path.name.startswith("loadgen-results-")
    data = json.loads(result.path.read_text())
    assert data["partial"] is False and data["levels"][0]["requests"]["completed"] == 2


def test_saturation_warning_suggests_uvloop_only_when_it_is_not_in_use():
    from loadgen.machine import MachineLoad
    from loadgen.selfcheck import Observed, diagnose

    busy = MachineLoad(98.0, 1.0, 0.0, 5.0, 2, 1.0)  # our own loop uses the whole core
    without = diagnose(Observed(busy, 40.0, 35.0, 50.0, on_uvloop=False))[1]
    with_uvloop = diagnose(Observed(busy, 40.0, 35.0, 50.0, on_uvloop=True))[1]
    assert "loadgen[fast]" in without
    assert "CPU-bound" in with_uvloop and "loadgen[fast]" not in with_uvloop


def test_help_imports_no_heavy_libraries_and_lists_every_command():
    """`loadgen --help` stays fast: boto3, numpy, YAML, matplotlib, aiohttp load when used."""
    code = ("import sys\nfrom loadgen.cli import cli\n"
            "try:\n    cli(['--help'], prog_name='loadgen')\nexcept SystemExit:\n    pass\n"
            "heavy = ('numpy', 'boto3', 'botocore', 'yaml', 'matplotlib', 'aiohttp')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    *help_lines, loaded = done.stdout.strip().splitlines()
    assert loaded == "[]"
    listed = {line.split()[0] for line in help_lines if line.startswith("  ")
              and not line.strip().startswith("-")}
    assert {"run", "sweep", "report", "compare", "endpoint", "facts", "scenario",
            "mock-server"} <= listed


def test_every_lazy_command_resolves_to_its_command():
    import click

    from loadgen.cli.main import LAZY_COMMANDS

    with click.Context(cli) as ctx:
        for name in LAZY_COMMANDS:
            command = cli.get_command(ctx, name)
            assert isinstance(command, click.Command) and command.name == name


def test_terminal_progress_shows_level_counts_rate_errors_in_flight_and_eta(start_sim, tmp_path):
    """On a terminal (a pseudo-terminal here) the live display is drawn on stderr."""
    import pty
    import select

    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.02))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "run", "--target", url,
                             "--concurrency", "2", "--requests", "6", "--output-tokens", "20",
                             "--out", str(tmp_path / "r.json")],
                            stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    proc.wait(timeout=30)
    assert proc.returncode == 0
    text = drawn.decode(errors="replace")
    bar = next(line for line in text.split("\r") if "/6 requests" in line)
    for fragment in ("[1/1] concurrency 2", "tok/s", "errors 0", "in flight", "ETA"):
        assert fragment in bar, (fragment, bar)
    assert "[1/1] concurrency 2: 6 ok, 0 failed" in text  # the finished level's line


def test_sigterm_stops_a_scenario_like_ctrl_c(tmp_path):
    """A scenario stopped by SIGTERM tears down and keeps its phase files (no later phase)."""
    from pathlib import Path

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "demo-simulated.yaml"
    out = tmp_path / "study"
    proc = start_cli("scenario", "run", str(scenario), "--simulate", "--time-scale", "40",
                     "--out", str(out))
    wait_for_line(proc.stderr, "phase 1/3")
    proc.send_signal(signal.SIGTERM)
    _, stderr = finish(proc)
    assert proc.returncode == 130, stderr
    assert "stopping: tearing down" in stderr and "phase 2/3" not in stderr
    assert (out / "phase-bf16-a.json").exists()
