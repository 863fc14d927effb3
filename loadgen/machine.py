"""What the machine did to this process while a level ran (Linux ``/proc``; elsewhere the
figures are simply unknown).

- **Run-queue wait**: ``/proc/self/schedstat``'s second field, the time this process's
  main thread (the event loop) was ready to run but waited for a CPU.
- **Steal**: the hypervisor ran another guest on our virtual CPU (``/proc/stat``).
- **Other processes' CPU** on the cores this process may use (its affinity), and the
  number of runnable tasks machine-wide (``/proc/loadavg``), sampled while the level runs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    wall_ns: int
    own_cpu_s: float
    wait_ns: int | None  # run-queue wait so far (None: unknown)
    cores: dict[str, tuple[int, int, int]]  # cpuN -> (busy, steal, total) ticks, our cores


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _our_cores() -> set[str]:
    try:
        return {f"cpu{n}" for n in os.sched_getaffinity(0)}
    except (AttributeError, OSError):
        return set()


def sample() -> Sample:
    schedstat = _read("/proc/self/schedstat")
    wait = int(schedstat.split()[1]) if schedstat else None
    cores: dict[str, tuple[int, int, int]] = {}
    ours = _our_cores()
    for line in (_read("/proc/stat") or "").splitlines():
        name, *fields = line.split()
        if name in ours:
            user, nice, system, idle, iowait, irq, softirq, steal = (
                [int(x) for x in fields[:8]] + [0] * 8)[:8]
            busy = user + nice + system + irq + softirq
            cores[name] = (busy, steal, busy + idle + iowait + steal)
    return Sample(time.perf_counter_ns(), time.process_time(), wait, cores)


def runnable() -> int | None:
    """Tasks running or ready to run machine-wide now (``/proc/loadavg``), ourselves included."""
    text = _read("/proc/loadavg")
    try:
        return int(text.split()[3].split("/")[0]) if text else None
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class MachineLoad:
    """Between two samples, in percent of the wall time (CPU figures: of one core)."""

    own_cpu_percent: float
    wait_percent: float | None  # our event loop ready but waiting for a CPU
    steal_percent: float | None  # of our cores' time
    others_cpu_percent: float | None  # other processes on our cores, in % of one core
    cores: int  # cores we may use
    runnable: float | None  # mean runnable tasks machine-wide

    def to_dict(self) -> dict:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in vars(self).items()}


def between(a: Sample, b: Sample, runnable_samples: list[int]) -> MachineLoad:
    wall_s = max(1e-9, (b.wall_ns - a.wall_ns) / 1e9)
    own = 100 * (b.own_cpu_s - a.own_cpu_s) / wall_s
    wait = (100 * (b.wait_ns - a.wait_ns) / 1e9 / wall_s
            if a.wait_ns is not None and b.wait_ns is not None else None)
    steal = others = None
    deltas = [(b.cores[n][0] - a.cores[n][0], b.cores[n][1] - a.cores[n][1],
               b.cores[n][2] - a.cores[n][2]) for n in a.cores if n in b.cores]
    total = sum(d[2] for d in deltas)
    if total > 0:
        steal = 100 * sum(d[1] for d in deltas) / total
        busy_cores = len(deltas) * sum(d[0] for d in deltas) / total
        others = max(0.0, 100 * busy_cores - own)
    mean_runnable = (sum(runnable_samples) / len(runnable_samples) if runnable_samples
                     else None)
    return MachineLoad(own, wait, steal, others, len(deltas) or (os.cpu_count() or 1),
                       mean_runnable)
