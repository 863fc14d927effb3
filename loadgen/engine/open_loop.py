"""Arrival rate (open loop) and trace replay: request *i* is sent at ``start + offset_i``.

Offsets come from the load (``i / rate``, seeded Poisson gaps, a trace's timestamps), ramped
when the level has a ramp-up, and only this process's share of them. They are absolute: a
late send never shifts the ones after it, and latency is measured from the due time, so a
slow server cannot hide behind a late client (coordinated omission).
"""

from __future__ import annotations

import asyncio

from ..load import ArrivalRate, ramped
from ..workload.trace import TraceReplay
from . import sessions
from .level import Level

from .._compat import TaskGroup


async def send_on_schedule(level: Level, load: ArrivalRate | TraceReplay, tg: TaskGroup,
                           tasks: set[asyncio.Task]) -> None:
    """Start each request in ``tg`` when it is due; ``tasks`` holds those not done yet.

    Returns when the level may start no more requests (its limit, or an arrival due at or
    after the stop deadline); a stop cancels it while it waits. When the schedule is behind
    (the rate exceeds what the client can send), due requests are sent at once, but the
    loop still yields after each one: the stop, Ctrl-C and finishing requests get their
    turn. The in-flight cap (``max_in_flight``) counts requests handed to the event loop
    (tasks not done yet), not requests on the wire, so a backlog never grows past it: an
    arrival that finds the cap full is dropped, and counted.
    """
    for offset in level.how.share.arrivals(ramped(load.offsets_ns(), level.ramp_ns)):
        due = level.start_ns + offset
        if not level.may_start() or (level.deadline_ns is not None
                                     and due >= level.deadline_ns):
            return
        await level.clock.sleep_until(due)
        if level.stopping:
            return
        if load.max_in_flight is not None and len(tasks) >= load.max_in_flight:
            level.tally.metrics.add_dropped()
            level.issued += 1
            continue
        task = tg.create_task(sessions.start(level, level.next_item(), due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
