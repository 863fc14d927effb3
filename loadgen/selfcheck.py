"""Client self-check: is the load generator itself distorting its numbers, and if so why?

While a level runs, a tiny task asks the event loop to wake it every ``interval_s`` and
records how late it woke (event-loop lag) in an HDR histogram; at the end the process's
CPU and what the machine did to it (:mod:`loadgen.machine`: run-queue wait, steal, other
processes' CPU on our cores) are read. :func:`diagnose` then names one cause, judged
against the error that matters, the client's delay next to the level's TTFT:

- **client CPU-bound**: loadgen itself used about a core. More worker processes help,
  and are suggested only when there are cores for them.
- **machine busy**: loadgen waited for a CPU (run queue, steal, other processes) for a
  quarter of the time, or longer than it ran, while its own CPU was low. Nothing about
  loadgen's settings fixes that; it is said so.
- **bursts**: the loop was late at burst instants (many streams' events at once) while the
  average CPU was low, and loadgen was running through most of those late wake-ups (late
  while *not* running is a wait for a CPU: the machine); the message says what that adds
  to TTFT p99.

Severity: the client's delay is ``max(send lag p99, loop lag p99)``. Against TTFT p50 it
is a **warning** (printed, level flagged) from 25 %, a **note** (recorded, not alarming)
from 5 %, else nothing; under 1 ms it is below what matters for LLM latencies. A 9 ms send
lag on a 60 ms TTFT (15 %) is a note.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass

from . import machine
from .clock import MONOTONIC, Clock
from .metrics import UNIT_SCALE, new_histogram, summarize
from .runconfig import cpu_affinity, usable_cores

CPU_BOUND_PERCENT = 75.0  # loadgen's own CPU, of one core: "about a core"
BUSY_WAIT_PERCENT = 25.0  # of the wall time, ready to run but waiting for a CPU
BUSY_STEAL_PERCENT = 10.0
MIN_WAIT_PERCENT = 2.0  # waiting longer than running counts from here
BURST_LAG_MS = 2.0  # loop lag p99 below this is not a burst worth naming
WARN_SHARE, NOTE_SHARE = 0.25, 0.05  # client delay / TTFT p50
MIN_DELAY_MS = 1.0
WORKER_CPU_PERCENT = 60.0
LATE_NS = 1_000_000  # a self-check wake-up this late is examined (running or waiting?)  # what to aim a worker's CPU at when suggesting --workers


@dataclass(frozen=True)
class ClientReport:
    cpu_percent: float
    loop_lag_ms: dict
    saturated: bool  # the client itself (CPU or bursts) distorts timings enough to warn
    warning: str | None  # printed: the client's delay matters against the level's TTFT
    cause: str | None = None  # "cpu_bound", "machine_busy" or "bursts"
    note: str | None = None  # the same, below the warning threshold: recorded, not printed
    machine: dict | None = None  # :class:`loadgen.machine.MachineLoad` figures

    def to_dict(self) -> dict:
        return {"cpu_percent": round(self.cpu_percent, 1), "loop_lag_ms": self.loop_lag_ms,
                "saturated": self.saturated, "warning": self.warning, "cause": self.cause,
                "note": self.note, "machine": self.machine}


@dataclass(frozen=True)
class Observed:
    """Everything :func:`diagnose` judges (ms, percent of one core / of the wall time)."""

    load: machine.MachineLoad
    loop_lag_p99_ms: float | None
    send_lag_p99_ms: float | None = None
    ttft_p50_ms: float | None = None
    workers: int = 1  # processes generating this level (this is one of them)
    usable_cores: int = 1  # cores loadgen may use (runconfig.usable_cores)
    on_uvloop: bool = True
    # Of the self-check's late wake-ups, the share during which loadgen itself was running
    # (its CPU time advanced at least half the interval): its own bursts, not a wait for a
    # CPU. None: not observed.
    late_running_share: float | None = None


def _cause(o: Observed) -> str | None:
    load = o.load
    if load.own_cpu_percent >= CPU_BOUND_PERCENT:
        return "cpu_bound"
    wait = load.wait_percent or 0
    if (wait >= BUSY_WAIT_PERCENT or (load.steal_percent or 0) >= BUSY_STEAL_PERCENT
            or wait >= max(MIN_WAIT_PERCENT, load.own_cpu_percent)):
        return "machine_busy"  # ... or it waited for a CPU longer than it ran
    if (o.loop_lag_p99_ms or 0) >= BURST_LAG_MS:
        # Late while running: our own bursts. Late while not running: a CPU was not free.
        if o.late_running_share is not None and o.late_running_share < 0.5:
            return "machine_busy"
        return "bursts"
    return None


def _message(cause: str, o: Observed, delay: str) -> str:
    load = o.load
    if cause == "cpu_bound":
        text = (f"client CPU-bound ({load.own_cpu_percent:.0f}% of a core; {delay})")
        want = max(o.workers + 1,
                   math.ceil(o.workers * load.own_cpu_percent / WORKER_CPU_PERCENT))
        if o.usable_cores > o.workers:
            text += f": use --workers {min(o.usable_cores, want)}"
        else:
            text += f": no spare core for another worker ({o.usable_cores} usable)"
        if not o.on_uvloop:
            text += "; install loadgen[fast] (uvloop)"
        return text
    if cause == "machine_busy":
        facts = [f"loadgen waited for a CPU {load.wait_percent or 0:.0f}% of the time"]
        if load.runnable is not None:
            facts.append(f"{load.runnable:.1f} tasks runnable on the machine")
        if load.steal_percent:
            facts.append(f"steal {load.steal_percent:.0f}%")
        if load.others_cpu_percent is not None:
            facts.append(f"other processes used {load.others_cpu_percent:.0f}% of a core "
                         f"on its {load.cores} core{'s' * (load.cores > 1)}")
        return (f"machine busy ({', '.join(facts)}) while loadgen itself used "
                f"{load.own_cpu_percent:.0f}%; {delay}: the wait is the machine's, not "
                "the load's (a quieter machine, or taskset/chrt, removes it)")
    return (f"bursts: the event loop ran up to {o.loop_lag_p99_ms:.1f} ms late (p99) at "
            f"burst instants at {load.own_cpu_percent:.0f}% average CPU; that adds up to "
            f"{delay.split(' (')[0]} to TTFT p99")


def diagnose(o: Observed) -> tuple[str | None, str | None, str | None]:
    """(cause, warning, note): a pure function of what was observed."""
    cause = _cause(o)
    delay_ms = max(o.send_lag_p99_ms or 0.0, o.loop_lag_p99_ms or 0.0)
    if cause is None or delay_ms < MIN_DELAY_MS:
        return cause, None, None
    share = delay_ms / o.ttft_p50_ms if o.ttft_p50_ms else None
    delay = f"~{delay_ms:.1f} ms" + (f" ({share:.0%} of TTFT p50 {o.ttft_p50_ms:.1f} ms)"
                                     if share is not None else "")
    message = _message(cause, o, delay)
    if share is None or share >= WARN_SHARE:
        return cause, message, None
    if share >= NOTE_SHARE:
        return cause, None, message
    return cause, None, None


def _on_uvloop() -> bool:
    """Is this code running on uvloop (``loadgen[fast]``)? Then don't suggest installing it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return type(loop).__module__.startswith("uvloop")


class ClientMonitor:
    """``clock``: the engine's (None: the real one); lag is how late its wake-ups come."""

    RUNNABLE_EVERY = 10  # read the run queue every 10th wake-up (~100 ms)

    def __init__(self, interval_s: float = 0.01, clock: Clock = MONOTONIC) -> None:
        self.clock = clock
        self.interval_ns = int(interval_s * 1e9)
        self._lag = new_histogram("ttft_ms")  # µs latency histogram
        self._runnable: list[int] = []
        self._late = self._late_running = 0  # late wake-ups, and those while we ran
        self._start = machine.sample()

    async def run(self) -> None:
        """Sample until cancelled. Wake-ups are due at absolute times, so lag does not accumulate."""
        due = self.clock.now_ns() + self.interval_ns
        ticks = 0
        cpu_before, wall_before = time.process_time_ns(), time.perf_counter_ns()
        while True:
            await self.clock.sleep_until(due)
            now = self.clock.now_ns()
            lag = max(0, now - due)
            self._lag.record_value(lag // 1000)
            due = max(due + self.interval_ns, now)
            cpu, wall = time.process_time_ns(), time.perf_counter_ns()
            if lag >= LATE_NS:  # was the loop busy meanwhile, or waiting for a CPU?
                self._late += 1
                self._late_running += 2 * (cpu - cpu_before) >= wall - wall_before
            cpu_before, wall_before = cpu, wall
            ticks += 1
            if ticks % self.RUNNABLE_EVERY == 0 and (n := machine.runnable()) is not None:
                self._runnable.append(n)

    def report(self, send_lag_p99_ms: float | None = None, ttft_p50_ms: float | None = None,
               workers: int = 1) -> ClientReport:
        """``send_lag_p99_ms``: the level's p99 of intended -> written, when observed;
        ``ttft_p50_ms``: the level's TTFT p50 (what the client's delay is judged against);
        ``workers``: processes generating the level."""
        load = machine.between(self._start, machine.sample(), self._runnable)
        lag = {k: (round(v, 3) if isinstance(v, float) else v)
               for k, v in summarize(self._lag, UNIT_SCALE["ttft_ms"]).items()}
        observed = Observed(load, lag["p99"], send_lag_p99_ms, ttft_p50_ms, workers,
                            usable_cores(os.cpu_count() or 1, cpu_affinity()), _on_uvloop(),
                            self._late_running / self._late if self._late else None)
        cause, warning, note = diagnose(observed)
        saturated = warning is not None and cause != "machine_busy"
        return ClientReport(load.own_cpu_percent, lag, saturated, warning, cause, note,
                            load.to_dict())
