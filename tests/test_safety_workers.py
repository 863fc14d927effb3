"""Workers that die or cannot start: every request the server received is counted, the exit
code says what happened, and a worker's one-line error stays one line (issue 16, item 11)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from loadgen.simulator import SimProfile, SimulatorThread

pytestmark = pytest.mark.integration  # starts servers and worker processes

ROOT = Path(__file__).resolve().parents[1]


def loadgen_cli(*args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "loadgen.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def slow_sim():
    """A simulator whose requests take ~0.12 s (8 tokens), and its statistics."""
    thread = SimulatorThread(SimProfile(ttft_s=0.05, itl_s=0.01))
    url = thread.start()
    yield url, thread.simulator
    thread.stop()


def test_a_killed_worker_s_requests_are_counted_and_the_exit_code_says_so(tmp_path, slow_sim):
    url, sim = slow_sim
    out = tmp_path / "r.json"
    run = loadgen_cli("run", "--target", url, "--concurrency", "4", "--duration", "2",
                      "--output-tokens", "8", "--workers", "2", "--out", str(out),
                      "--quiet", "--server-metrics-interval", "0")
    deadline = time.monotonic() + 60
    while sim.statistics()["requests_received"] < 8 and time.monotonic() < deadline:
        time.sleep(0.05)  # the measured level is under way on both workers
    workers = children(run.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    _, stderr = run.communicate(timeout=60)
    received = sim.statistics()["requests_received"]
    assert run.returncode == 5, stderr  # its own code: no signal stopped the run
    assert "Traceback" not in stderr and "killed by signal 9" in stderr
    assert "partial: 1 worker(s) died" in stderr
    data = orjson.loads(out.read_bytes())
    level = data["levels"][0]
    requests = level["requests"]
    # Every request the server received is in the results: none lost with the worker.
    assert requests["completed"] + requests["failed"] + requests["incomplete"] == received
    lost = requests["incomplete_reasons"]["worker_died"]
    assert lost >= 1 and requests["incomplete"] >= lost
    assert data["partial"] is True and level["partial"] is True
    assert len(data["workers"]["dead"]) == 1
    dead = [w for w in level["workers"] if w["status"] == "died"]
    assert len(dead) == 1 and dead[0]["worker_died"] == lost


def _few_open_files() -> None:  # runs in the child, before loadgen starts
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_too_few_open_files_is_the_same_one_line_error_with_workers(tmp_path, sim_url):
    outcomes = []
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / f"r{len(extra)}.json"
        run = loadgen_cli("run", "--target", sim_url, "--concurrency", "1024", "--requests",
                          "8", "--out", str(out), "--quiet", "--server-metrics-interval", "0",
                          *extra, preexec_fn=_few_open_files)
        _, stderr = run.communicate(timeout=120)
        outcomes.append((run.returncode, stderr, out.exists()))
    for code, stderr, wrote in outcomes:
        assert code == 2, stderr
        assert stderr.count("\n") == 1 and stderr.startswith("Error: ")
        assert "open files but this process may open at most 256" in stderr
        assert "ulimit -n" in stderr and "Traceback" not in stderr
        assert not wrote  # no load was sent: no (empty, partial) results file
