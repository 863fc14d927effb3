"""A fake target for engine tests: it answers each request at scripted (virtual) times.

It keeps :mod:`loadgen.targets.base`'s contract (``open``/``send``/``close``/``describe``,
failures written to the record, only ``CancelledError`` propagates) and fills the
record's timestamps from the engine's clock, so with :mod:`tests.helpers.virtual_time`
every latency is exactly what the script says.

A :class:`Reply` says how one request is answered, in whole milliseconds after the
server begins it: the first token ``ttft_ms`` in, then one token every ``itl_ms``. With
``slots``, the server serves that many requests at once, first come first served; a
request arriving while they are all busy waits for the first to free up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

from loadgen.clock import Clock
from loadgen.record import TOKENS_FROM_USAGE, Prompt, RequestRecord

from .virtual_time import MS


@dataclass(frozen=True)
class Reply:
    ttft_ms: int = 10
    tokens: int = 1
    itl_ms: int = 0
    error: str | None = None  # fail at ttft_ms with this error type instead of answering
    text: str = "an answer"

    @property
    def duration_ns(self) -> int:
        return (self.ttft_ms + (self.tokens - 1) * self.itl_ms) * MS


# The reply to one request: a fixed one, or chosen per request (by its prompt or record).
Script = Union[Reply, Callable[[Prompt, RequestRecord], Reply]]


class ScriptedTarget:
    """``late_ms``: the client side stalls this long before writing a request (like a slow
    body build or connect): ``sent_ns`` is that much later, and so is ``start_ns`` unless
    the engine set it (closed loop)."""

    def __init__(self, clock: Clock, script: Script = Reply(), slots: int | None = None,
                 late_ms: int = 0) -> None:
        self.clock = clock
        self.script = script
        self.late_ms = late_ms
        self._free_at = [0] * slots if slots else None  # when each server slot frees up
        self.sent: list[int] = []  # request ids, in the order they were written

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"url": "scripted://", "api": "chat", "model": "scripted"}

    async def send(self, prompt: Prompt, record: RequestRecord) -> None:
        if self.late_ms:
            await self.clock.sleep_until(self.clock.now_ns() + self.late_ms * MS)
        record.start_ns = record.start_ns or self.clock.now_ns()
        record.sent_ns = self.clock.now_ns()
        self.sent.append(record.request_id)
        reply = self.script if isinstance(self.script, Reply) else self.script(prompt, record)
        begin = self._admit(record.sent_ns, reply)
        if reply.error is not None:
            await self.clock.sleep_until(begin + reply.ttft_ms * MS)
            record.fail(reply.error, "scripted failure", self.clock.now_ns())
            return
        for token in range(reply.tokens):
            await self.clock.sleep_until(begin + (reply.ttft_ms + token * reply.itl_ms) * MS)
            record.content_ns.append(self.clock.now_ns())
            record.output_tokens += 1
        record.tokens_source = TOKENS_FROM_USAGE
        record.text = reply.text
        record.end_ns = self.clock.now_ns()

    def _admit(self, arrived_ns: int, reply: Reply) -> int:
        """When the server begins this request: at once, or when a slot frees up."""
        if self._free_at is None:
            return arrived_ns
        slot = min(range(len(self._free_at)), key=self._free_at.__getitem__)
        begin = max(arrived_ns, self._free_at[slot])
        self._free_at[slot] = begin + reply.duration_ns
        return begin
