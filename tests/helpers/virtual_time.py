"""Virtual time for engine tests: exact schedules instead of wall-clock ranges.

``run_virtual(main())`` runs a coroutine on an event loop whose time is fake (looptime):
when every task is waiting, the loop jumps straight to the next timer, so a level that
would take seconds runs in milliseconds and every instant is exact. :class:`LoopClock` is
the engine's clock on that loop: ``now_ns()`` is the loop's time in integer nanoseconds
(looptime keeps time as integers, 1 ns here, so no float error creeps in).

Only for code that waits on the loop's timers, never on real I/O.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

import looptime

T = TypeVar("T")
MS = 1_000_000  # ns


class LoopClock:
    """The running loop's time as a :class:`loadgen.clock.Clock`."""

    def now_ns(self) -> int:
        return round(asyncio.get_running_loop().time() * 1e9)

    async def sleep_until(self, t_ns: int) -> None:
        await asyncio.sleep(max(0, t_ns - self.now_ns()) / 1e9)


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` in virtual time, from 1 s (0 reads as "not set" in a record). A run that would wait forever fails after
    one real second; one that runs past 10 virtual minutes fails too (a runaway schedule)."""
    loop = looptime.new_event_loop(start=1, resolution=1e-9, end=600, idle_timeout=1.0)
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
