"""The streaming transport's fast path, played in virtual time.

:class:`ChainingTarget` answers like :class:`~tests.helpers.scripted_target.ScriptedTarget`
and keeps the :class:`~loadgen.targets.base.ChainingTarget` contract as the HTTP pool does:
the instant a reply ends it asks the stream's successor for the next request and "writes"
it (its scripted reply starts), then the engine's task wakes ``wake_ms`` later (a busy
loop) and finds that request in flight.
"""

from __future__ import annotations

import asyncio

from loadgen.targets.base import PreparedRequest

from .scripted_target import ScriptedTarget
from .virtual_time import MS


class ChainingTarget(ScriptedTarget):
    def __init__(self, *args, wake_ms: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.wake_ms = wake_ms
        self.chained: list[int] = []  # request ids sent by the fast path

    def prepare(self, prompt, record) -> PreparedRequest:
        return PreparedRequest(b"{}", wire=b"request %d" % record.request_id)

    async def send_prepared(self, prepared, record, on_sent=None) -> None:
        await self.send(None, record)

    async def send_chained(self, prepared, record, on_sent, successor, started=None) -> None:
        reply = started
        if reply is None:
            reply = asyncio.ensure_future(self.send(None, record))
            if on_sent is not None:
                on_sent()  # the engine builds the next request while this one is in flight
        try:
            await asyncio.shield(reply)
        except asyncio.CancelledError:
            reply.cancel()
            raise
        # The reply ended (record.end_ns): what the pool does in data_received.
        if successor.peek() is not None:
            now = self.clock.now_ns()
            following = successor.claim(now)
            following.start_ns = now
            self.chained.append(following.request_id)
            successor.started(asyncio.ensure_future(self.send(None, following)))
            if on_sent is not None:
                on_sent()
        if self.wake_ms:
            await self.clock.sleep_until(self.clock.now_ns() + self.wake_ms * MS)
