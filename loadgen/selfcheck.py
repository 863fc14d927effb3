"""Client self-check: is the load generator itself distorting its numbers?

While a level runs, a tiny task asks the event loop to wake it every
``interval_s`` and records how late it woke (event-loop lag) in an HDR
histogram; the process CPU time over the level gives the client's CPU use.
A busy loop delays every timestamp it takes, so a saturated client reports
latencies that belong to itself, not the server.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .clock import MONOTONIC, Clock
from .metrics import UNIT_SCALE, new_histogram, summarize

# Above these, timings are likely the client's fault: warn.
CPU_PERCENT_LIMIT = 90.0
LOOP_LAG_P99_LIMIT_MS = 10.0
SEND_LAG_P99_LIMIT_MS = 5.0


@dataclass(frozen=True)
class ClientReport:
    cpu_percent: float
    loop_lag_ms: dict
    saturated: bool
    warning: str | None

    def to_dict(self) -> dict:
        return {"cpu_percent": round(self.cpu_percent, 1), "loop_lag_ms": self.loop_lag_ms,
                "saturated": self.saturated, "warning": self.warning}


def _on_uvloop() -> bool:
    """Is this code running on uvloop (``loadgen[fast]``)? Then don't suggest installing it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return type(loop).__module__.startswith("uvloop")


class ClientMonitor:
    """``clock``: the engine's (None: the real one); lag is how late its wake-ups come."""

    def __init__(self, interval_s: float = 0.01, clock: Clock = MONOTONIC) -> None:
        self.clock = clock
        self.interval_ns = int(interval_s * 1e9)
        self._lag = new_histogram("ttft_ms")  # µs latency histogram
        self._lag_total = 0  # exact sum: the mean without hdrh's walk over every bucket
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()

    async def run(self) -> None:
        """Sample until cancelled. Wake-ups are due at absolute times, so lag does not accumulate."""
        due = self.clock.now_ns() + self.interval_ns
        while True:
            await self.clock.sleep_until(due)
            now = self.clock.now_ns()
            lag_us = max(0, now - due) // 1000
            self._lag.record_value(lag_us)
            self._lag_total += lag_us
            due = max(due + self.interval_ns, now)

    def report(self, send_lag_p99_ms: float | None = None) -> ClientReport:
        """``send_lag_p99_ms``: the level's p99 of intended -> written, when it was observed."""
        wall = time.perf_counter() - self._wall0
        cpu = 100.0 * (time.process_time() - self._cpu0) / wall if wall > 0 else 0.0
        lag = {k: (round(v, 3) if isinstance(v, float) else v)
               for k, v in summarize(self._lag, UNIT_SCALE["ttft_ms"], self._lag_total).items()}
        reasons = []
        if cpu > CPU_PERCENT_LIMIT:
            reasons.append(f"client CPU {cpu:.0f}% of a core")
        if lag["p99"] is not None and lag["p99"] > LOOP_LAG_P99_LIMIT_MS:
            reasons.append(f"event-loop lag p99 {lag['p99']:.1f} ms")
        if send_lag_p99_ms is not None and send_lag_p99_ms > SEND_LAG_P99_LIMIT_MS:
            reasons.append(f"requests left the client late by p99 {send_lag_p99_ms:.1f} ms")
        warning = None
        if reasons:
            advice = "lower the load per process"
            if not _on_uvloop():
                advice += " or install loadgen[fast] (uvloop)"
            warning = ("client saturated (" + ", ".join(reasons) + "): timings may include "
                       f"client delay; {advice}")
        return ClientReport(cpu, lag, bool(reasons), warning)
