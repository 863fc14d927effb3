"""Sending: one request, or a whole multi-turn session, from its start to its tallied record.

Whatever happens to a request becomes data in its record: a failure is counted by type, a
request cancelled at the graceful-stop deadline is counted incomplete. A multi-turn session
sends its turns in order on one stream, each carrying the history so far with the model's
answers; a later turn is due when the previous answer ended plus the think time.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine

from ..record import Prompt, RequestRecord
from ..targets.base import PreparedRequest, Successor
from ..workload.prompts import Session
from .level import Level, first_turn


async def send(level: Level, prompt: Prompt, rec: RequestRecord,
               prepared: PreparedRequest | None = None,
               on_sent: Callable[[], None] | None = None,
               successor: Successor | None = None, started: Any = None) -> None:
    """Send one request and tally its record. Never raises, except ``CancelledError``
    (the record is tallied as incomplete first). ``successor``, ``started``: the closed
    loop's fast path (:mod:`.closed_loop`)."""
    level.in_flight += 1
    try:
        if successor is not None and prepared is not None:
            await level.target.send_chained(  # type: ignore[attr-defined]
                prepared, rec, on_sent, successor, started)
        elif prepared is not None:
            await level.target.send_prepared(prepared, rec, on_sent)  # type: ignore[attr-defined]
        else:
            await level.target.send(prompt, rec)
    except asyncio.CancelledError:
        rec.incomplete = True
        rec.end_ns = rec.end_ns or level.clock.now_ns()
        level.tally.add(rec)
        raise
    except Exception as exc:  # a target bug must not kill the run: it is data too
        rec.fail("client_error", f"{type(exc).__name__}: {exc}"[:300], level.clock.now_ns())
    finally:
        level.in_flight -= 1
    level.tally.add(rec)


def start(level: Level, item: Prompt | Session,
          intended_ns: int) -> Coroutine[Any, Any, RequestRecord]:
    """Open loop: count the request now (the next limit check must see it) and return what
    sends it, one prompt or a whole session, and returns the last record."""
    session, prompt = first_turn(item)
    return run(level, session, prompt, level.new_record(prompt, intended_ns), closed=False)


async def run(level: Level, session: Session | None, prompt: Prompt, rec: RequestRecord,
              closed: bool, prepared: PreparedRequest | None = None,
              on_sent: Callable[[], None] | None = None,
              successor: Successor | None = None, started: Any = None) -> RequestRecord:
    """Send ``prompt``; in a session, then its next turns. ``closed``: the request starts
    now (closed loop), so its start time is taken here (unless the fast path sent it:
    ``started``). ``prepared`` (and ``on_sent``, ``successor``): the first request, built
    ahead by the closed loop. A failed turn ends its session: the next turn would have no
    answer to build on."""
    while True:
        if closed and started is None:
            rec.start_ns = level.clock.now_ns()
        await send(level, prompt, rec, prepared, on_sent, successor, started)
        started = successor = None
        prepared = None  # later turns need the answer: built when due
        if session is None or not rec.ok or prompt.turn == len(session.turns):
            return rec
        history = (*prompt.messages, {"role": "assistant", "content": rec.text or ""})
        due = (rec.end_ns or level.clock.now_ns()) + round(session.think_s * 1e9)
        if session.think_s:
            await level.clock.sleep_until(due)
        if not level.may_start():
            return rec
        prompt = session.prompt(prompt.turn + 1, history)
        rec, closed = level.new_record(prompt, due), True
