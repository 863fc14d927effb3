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
from tests.helpers.procs import children

ROOT = Path(__file__).resolve().parents[1]


def loadgen_cli(*args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "loadgen.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


@pytest.fixture
def slow_sim():
    """A simulator whose requests take ~0.12 s (8 tokens), and its statistics."""
    thread = SimulatorThread(SimProfile(ttft_s=0.05, itl_s=0.01))
    url = thread.start()
    yield url, thread.simulator
    thread.stop()


@pytest.mark.integration  # starts a simulator and worker processes
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


@pytest.mark.integration
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


def test_hdr_intervals_of_workers_merge_by_interval(tmp_path):
    """Interval k is written once every worker measuring the level sent its interval k (or
    died), as the sum of their histograms: one file, as one process writes."""
    from hdrh.log import HistogramLogReader

    from loadgen.export import HdrIntervalLog
    from loadgen.load import ConstantConcurrency
    from loadgen.metrics import new_histogram

    def part(*values_ms):
        hist = new_histogram("ttft_ms")
        for value in values_ms:
            hist.record_value(value * 1000)  # µs
        return {"ttft_ms": hist.encode().decode("ascii")}

    log = HdrIntervalLog(tmp_path, interval_s=1.0)
    log.begin_level(1, ConstantConcurrency(4))
    log.expect_parts([0, 1])
    path = tmp_path / "01-concurrency-4.ttft_ms.hlog"

    def written():
        reader = HistogramLogReader(str(path), new_histogram("ttft_ms"))
        found = []
        while (hist := reader.get_next_interval_histogram()) is not None:
            found.append((hist.get_start_time_stamp(), hist.get_total_count(),
                          hist.get_max_value() // 1000))
        reader.close()
        return found

    log.add_part(0, 0, 0.0, 1.0, part(10, 20))
    log.add_part(0, 1, 1.0, 2.0, part(30))
    assert written() == []  # interval 0 waits for worker 1
    log.add_part(1, 0, 0.0, 1.0, part(50))
    assert [(count, top) for _, count, top in written()] == [(3, 50)]
    log.drop_part(1)  # worker 1 died: interval 1 no longer waits for it
    assert [(count, top) for _, count, top in written()] == [(3, 50), (1, 30)]
    log.add_part(0, 2, 2.0, 2.4, part(40))  # the last, partial interval: at the level's end
    log.end_level()
    intervals = written()
    assert [(count, top) for _, count, top in intervals] == [(3, 50), (1, 30), (1, 40)]
    starts = [start for start, _, _ in intervals]
    assert starts == sorted(starts) and len(set(starts)) == 3
