"""The client self-check tells causes apart and judges them against the level's TTFT.

The judgement is a pure function (:func:`loadgen.selfcheck.diagnose`) of what was observed;
the last three tests provoke each cause for real, briefly: another process hogging our
core, bursts of work in our loop at low average CPU, and our own loop saturated.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from loadgen.machine import MachineLoad
from loadgen.selfcheck import ClientMonitor, Observed, diagnose


def load(own=5.0, wait=0.0, steal=0.0, others=10.0, cores=2, runnable=1.0) -> MachineLoad:
    return MachineLoad(own, wait, steal, others, cores, runnable)


def test_a_9_ms_send_lag_on_a_60_ms_ttft_on_a_busy_machine_is_a_note_without_advice():
    # The first sweep: concurrency 1, 5 % client CPU, others hold the CPU.
    cause, warning, note = diagnose(Observed(load(own=5, wait=30, others=150, runnable=6),
                                             loop_lag_p99_ms=7.0, send_lag_p99_ms=9.0,
                                             ttft_p50_ms=60.0))
    assert cause == "machine_busy" and warning is None
    assert note.startswith("machine busy") and "15% of TTFT p50" in note
    assert "--workers" not in note and "load per process" not in note


def test_steal_alone_makes_the_machine_busy():
    assert diagnose(Observed(load(own=10, steal=20), 30.0, 30.0, 50.0))[0] == "machine_busy"


def test_waiting_longer_than_running_is_the_machine_not_bursts():
    # The README's first sweep on a busy machine: 3 % CPU, 4 % waiting, others ~190 %.
    busy = load(own=3.4, wait=4.0, others=190, runnable=4.1)
    assert diagnose(Observed(busy, 4.9, 2.3, 51.5))[0] == "machine_busy"
    assert diagnose(Observed(load(own=20, wait=4.0), 4.9, 2.3, 51.5))[0] == "bursts"
    # Late wake-ups while loadgen was not running are a wait for a CPU, whatever the totals.
    assert diagnose(Observed(load(own=3, wait=1.0), 4.9, 2.3, 51.5,
                             late_running_share=0.1))[0] == "machine_busy"
    assert diagnose(Observed(load(own=3, wait=1.0), 4.9, 2.3, 51.5,
                             late_running_share=0.9))[0] == "bursts"


def test_cpu_bound_suggests_workers_only_when_there_are_cores_for_them():
    observed = dict(loop_lag_p99_ms=30.0, send_lag_p99_ms=25.0, ttft_p50_ms=50.0)
    cause, warning, _ = diagnose(Observed(load(own=97), usable_cores=4, **observed))
    assert cause == "cpu_bound" and warning.endswith("use --workers 2")
    _, warning, _ = diagnose(Observed(load(own=97), workers=2, usable_cores=7, **observed))
    assert "use --workers 4" in warning  # 2 workers at 97 %: aim each at ~60 %
    _, warning, _ = diagnose(Observed(load(own=97), usable_cores=1, **observed))
    assert "--workers" not in warning and "no spare core" in warning


def test_bursts_say_what_they_add_to_ttft_p99():
    cause, warning, note = diagnose(Observed(load(own=20), 30.0, 12.0, 50.0))
    assert cause == "bursts" and note is None
    assert "30.0 ms late (p99)" in warning and "adds up to ~30.0 ms to TTFT p99" in warning


@pytest.mark.parametrize("lag, send, ttft", [(0.8, 0.5, 2.0), (3.0, 2.0, 500.0)])
def test_a_delay_below_1_ms_or_5_percent_of_ttft_says_nothing(lag, send, ttft):
    cause, warning, note = diagnose(Observed(load(own=20), lag, send, ttft))
    assert warning is None and note is None


def monitor_while(work, seconds: float = 0.8) -> "ClientMonitor":
    async def main():
        monitor = ClientMonitor()
        task = asyncio.ensure_future(monitor.run())
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            await work()
        task.cancel()
        return monitor

    return asyncio.run(main())


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
@pytest.mark.integration  # starts processes
def test_a_cpu_hog_on_our_core_is_the_machine_being_busy():
    # Our monitored process and a hog, both pinned to one core: the hog takes what it can,
    # and our loop, which wants ~10 % of the core, waits for it.
    child = r'''
import asyncio, os, subprocess, sys, time
from loadgen.selfcheck import ClientMonitor
core = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {core})
hog = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 4\n"
                        "while time.time() < end: pass"],  # ends by itself, whatever happens
                       preexec_fn=lambda: os.sched_setaffinity(0, {core}))
time.sleep(0.2)
async def main():
    monitor = ClientMonitor()
    task = asyncio.ensure_future(monitor.run())
    stop = time.perf_counter() + 0.6
    while time.perf_counter() < stop:
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end: pass
        await asyncio.sleep(0.01)
    task.cancel()
    return monitor.report(send_lag_p99_ms=5.0, ttft_p50_ms=10.0)
try:
    report = asyncio.run(main())
finally:
    hog.kill()
print(report.cause)
print(report.warning or report.note)
print(report.machine, report.loop_lag_ms["p99"])
'''
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=30, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr
    cause, message, facts = done.stdout.strip().splitlines()
    assert cause == "machine_busy", facts
    assert "waited for a CPU" in message and "--workers" not in message


def test_bursts_in_our_loop_at_low_average_cpu_are_bursts():
    async def burst():
        spin(0.03)  # a burst of work: 30 ms with the loop held, then 100 ms idle
        await asyncio.sleep(0.1)

    report = monitor_while(burst).report(ttft_p50_ms=50.0)
    # On a machine busy enough to hold us back (waiting for a CPU longer than we ran, or
    # late wake-ups while we were not running), that is named first: which of the two a
    # shared machine gives is its business; the rule itself is tested purely above.
    assert report.cause in ("bursts", "machine_busy"), report.machine
    assert report.cpu_percent < 75
    if report.cause == "bursts":
        assert "adds up to" in report.warning and report.saturated
    else:
        assert not report.saturated
        assert "load per process" not in (report.warning or "") + (report.note or "")


def test_our_own_loop_saturated_is_client_cpu_bound():
    async def busy():
        spin(0.01)
        await asyncio.sleep(0)

    report = monitor_while(busy).report(send_lag_p99_ms=20.0, ttft_p50_ms=50.0)
    if report.cpu_percent >= 75:
        assert report.cause == "cpu_bound" and "CPU-bound" in report.warning
        assert report.saturated
    else:  # others took the core we wanted: that is the machine, and said so
        assert report.cause == "machine_busy" and report.machine["wait_percent"] >= 25
