"""Constant concurrency (closed loop): N streams, each sending its next request the moment
its previous response ended.

A stream's next request is due when the previous response ended: any delay after that
(task wake-up, building, writing) is the client's, and counts in the latencies. So the next
request is built while the current one is in flight (right after its bytes were written), not
after it ends. ``max_rate`` (asyncio-throttle) delays sends across all streams; the delay it
imposes is intended, so a capped request is due when the cap lets it go.

The fast path: a target that can (:class:`~loadgen.targets.base.ChainingTarget`, on its
streaming transport) is handed the stream's :class:`NextRequest`; when a response ends
where the transport reads it, the transport sends the prebuilt next request right there,
due at that response's end, before this stream's task has woken. The task stays the
owner: it finds the request in flight, waits for it and tallies it like any other.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from asyncio_throttle import Throttler

from ..load import ConstantConcurrency
from ..record import RequestRecord
from ..targets.base import PreparedRequest
from . import sessions
from .level import Level, Upcoming

if sys.version_info < (3, 11):  # pragma: no cover
    from taskgroup import TaskGroup
else:
    from asyncio import TaskGroup


def first_requests(level: Level, load: ConstantConcurrency) -> list[Upcoming]:
    """Each stream's first request, built before the level starts (at most as many as the
    level may send): otherwise C streams due at the same instant build C bodies (and
    SigV4 signatures) after it, and the last one leaves C builds late."""
    count = load.concurrency if level.limit is None else min(load.concurrency, level.limit)
    return [level.prepare_next() for _ in range(count)]


def start_streams(level: Level, load: ConstantConcurrency, tg: TaskGroup,
                  tasks: set[asyncio.Task], firsts: list[Upcoming] = ()) -> None:
    """Start the level's streams in ``tg``; ``tasks`` holds them (they carry requests).
    ``firsts``: streams' first requests, built ahead (:func:`first_requests`)."""
    throttler = Throttler(1, period=1 / load.max_rate) if load.max_rate else None
    for index in range(load.concurrency):
        first = firsts[index] if index < len(firsts) else None
        tasks.add(tg.create_task(_stream(level, load, index, throttler, first)))


class NextRequest:
    """A stream's next request: built ahead (``upcoming``), then either taken by the
    stream's task when the current request ends, or claimed by the transport at that very
    instant (the fast path, :class:`~loadgen.targets.base.Successor`) and found in flight
    by the task. Claimed requests keep the engine's accounting: due at the previous
    response's end, counted as issued when sent, never past the limit or a stop."""

    __slots__ = ("level", "upcoming", "claimed", "handle")

    def __init__(self, level: Level) -> None:
        self.level = level
        self.upcoming: Upcoming | None = None
        self.claimed: Upcoming | None = None  # sent by the transport, not yet taken
        self.handle: Any = None  # the transport's handle on the claimed request

    # -- the transport's side (called from data_received) -----------------------------------
    def peek(self) -> PreparedRequest | None:
        upcoming = self.upcoming
        if (upcoming is None or self.claimed is not None or upcoming[0] is not None
                or not self.level.may_start()):
            return None  # nothing built, the previous claim not yet taken, a session, or stop
        return upcoming[3]

    def claim(self, end_ns: int) -> RequestRecord:
        upcoming, self.upcoming = self.upcoming, None
        assert upcoming is not None
        rec = upcoming[2]
        self.level.count_issued(end_ns)
        rec.intended_ns = end_ns
        self.claimed = upcoming
        return rec

    def started(self, handle: Any) -> None:
        self.handle = handle

    # -- the task's side ----------------------------------------------------------------------
    def take(self) -> tuple[Upcoming, Any] | None:
        """The request the transport sent, and its handle (None: none was)."""
        claimed, handle = self.claimed, self.handle
        self.claimed = self.handle = None
        return None if claimed is None else (claimed, handle)

    def abandon(self) -> None:
        """The stream is cancelled (graceful stop over): a claimed request still in flight
        is tallied as incomplete, as the task would have."""
        taken = self.take()
        if taken is not None:
            rec = taken[0][2]
            rec.incomplete = True
            rec.end_ns = rec.end_ns or self.level.clock.now_ns()
            self.level.tally.add(rec)


async def _stream(level: Level, load: ConstantConcurrency, index: int,
                  throttler: Throttler | None, first: Upcoming | None = None) -> None:
    """Stream ``index`` of this process: requests back to back until the level may start
    no more. With a ramp-up, the stream starts g/C of the way through it, g being its
    level-wide index and C the level's concurrency (with workers, worker i's stream j is
    stream i + j·N of the level, :class:`~loadgen.engine.share.Share`), as in one process."""
    clock = level.clock
    concurrency = getattr(level.whole, "concurrency", load.concurrency)
    due = level.start_ns + level.ramp_ns * level.how.share.request_index(index) // concurrency
    await clock.sleep_until(due)
    following = NextRequest(level)
    following.upcoming = first
    # The cap's delays are the task's to take: no fast path under max_rate.
    chain = following if level.chaining and throttler is None else None
    loop = asyncio.get_running_loop()

    def build_next() -> None:
        if following.upcoming is None and level.may_start():
            following.upcoming = level.prepare_next()

    def after_write() -> None:
        # Not now: other streams of the same burst are waiting to write theirs.
        loop.call_soon(build_next)

    try:
        while True:
            taken = following.take()
            if taken is not None:  # sent by the transport as the previous response ended
                (session, prompt, rec, prepared), handle = taken
            else:
                if not level.may_start():
                    return
                if throttler is not None:
                    await throttler.acquire()
                    if not level.may_start():
                        return
                    due = max(due, clock.now_ns())  # the cap's delay is intended
                session, prompt, rec, prepared = following.upcoming or level.prepare_next()
                following.upcoming, handle = None, None
                level.count_issued(due)
                rec.intended_ns = due
            last = await sessions.run(level, session, prompt, rec, True, prepared, after_write,
                                      chain if session is None else None, handle)
            due = last.end_ns or clock.now_ns()
    except asyncio.CancelledError:
        following.abandon()
        raise
