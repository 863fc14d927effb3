"""Where the engine (and its self-check) reads the time and waits for it.

Every schedule in the engine is a list of absolute instants (start + i/rate, a previous
response's end, a stop deadline), so two operations are all it needs from a clock:
``now_ns()`` and ``sleep_until(t_ns)``. Taking the clock as a parameter lets tests run the
engine in virtual time (tests/helpers/virtual_time.py) and assert exact schedules instead of
wall-clock ranges.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Protocol

from ._compat import TaskGroup


class Clock(Protocol):
    """Integer nanoseconds on one monotonic time line, and a way to wait for an instant."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None:
        """Return at ``t_ns`` (at once when it has passed, after letting other tasks run)."""
        ...


class MonotonicClock:
    """The real clock: ``time.perf_counter_ns`` (CLOCK_MONOTONIC, shared by every process on
    the host, so worker processes agree on a start instant) and the event loop's timers
    (``loop.time()`` reads the same CLOCK_MONOTONIC)."""

    now_ns = staticmethod(time.perf_counter_ns)  # no Python frame on the hot path

    async def sleep_until(self, t_ns: int) -> None:
        # Always await: a task that is behind schedule still lets the loop run others.
        await asyncio.sleep(max(0, t_ns - time.perf_counter_ns()) / 1e9)


MONOTONIC = MonotonicClock()


async def first_of(*awaitables: Awaitable[Any]) -> None:
    """Wait until the first of ``awaitables`` finishes, then cancel the others (e.g. "the
    start instant or a stop", "every request done or the grace deadline")."""
    async with TaskGroup() as tg:
        tasks = [tg.create_task(_awaited(a)) for a in awaitables]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
