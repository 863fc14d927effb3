"""Constant concurrency (closed loop): N streams, each sending its next request the moment
its previous response ended.

A stream's next request is due when the previous response ended: any delay after that
(task wake-up, building, writing) is the client's, and counts in the latencies. So the next
request is built while the current one is in flight (right after its bytes were written), not
after it ends. ``max_rate`` (asyncio-throttle) delays sends across all streams; the delay it
imposes is intended, so a capped request is due when the cap lets it go.
"""

from __future__ import annotations

import asyncio

from asyncio_throttle import Throttler

from ..load import ConstantConcurrency
from . import sessions
from .level import Level, Upcoming

from .._compat import TaskGroup


def start_streams(level: Level, load: ConstantConcurrency, tg: TaskGroup,
                  tasks: set[asyncio.Task]) -> None:
    """Start the level's streams in ``tg``; ``tasks`` holds them (they carry requests)."""
    throttler = Throttler(1, period=1 / load.max_rate) if load.max_rate else None
    for index in range(load.concurrency):
        tasks.add(tg.create_task(_stream(level, load, index, throttler)))


async def _stream(level: Level, load: ConstantConcurrency, index: int,
                  throttler: Throttler | None) -> None:
    """Stream ``index`` of this process: requests back to back until the level may start
    no more. With a ramp-up, the stream starts g/C of the way through it, g being its
    level-wide index and C the level's concurrency (with workers, worker i's stream j is
    stream i + j·N of the level, :class:`~loadgen.engine.share.Share`), as in one process."""
    clock = level.clock
    concurrency = getattr(level.whole, "concurrency", load.concurrency)
    due = level.start_ns + level.ramp_ns * level.how.share.request_index(index) // concurrency
    await clock.sleep_until(due)
    upcoming: Upcoming | None = None
    loop = asyncio.get_running_loop()

    def build_next() -> None:
        nonlocal upcoming
        if upcoming is None and level.may_start():
            upcoming = level.prepare_next()

    def after_write() -> None:
        # Not now: other streams of the same burst are waiting to write theirs.
        loop.call_soon(build_next)

    while level.may_start():
        if throttler is not None:
            await throttler.acquire()
            if not level.may_start():
                return
            due = max(due, clock.now_ns())  # the cap's delay is intended
        session, prompt, rec, prepared = upcoming or level.prepare_next()
        upcoming = None
        level.count_issued(due)
        rec.intended_ns = due
        last = await sessions.run(level, session, prompt, rec, True, prepared, after_write)
        due = last.end_ns or clock.now_ns()
