"""When each token of one request goes out: an absolute schedule, written in batches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from .plan import Plan
from .scheduler import Ticket
from .state import SimState


class TokenClock:
    """Due times of a request's tokens, following the profile's batching model.

    Token 0 is due at ``first_due``; token ``k+1`` one ITL after token ``k``'s *due time*
    (not after it was actually written), so timer lateness never accumulates into drift.
    Each batch takes its KV room from the scheduler first; a preemption shifts the rest
    of the schedule by the time it cost.
    """

    def __init__(self, state: SimState, plan: Plan, first_due: float,
                 ticket: Ticket | None = None) -> None:
        self._ticket = ticket
        self._state = state
        self._profile = state.profile
        self._rng = plan.rng
        self._first_due = first_due

    def _interval(self) -> float:
        itl = self._profile.itl_at(self._state.running)
        if self._profile.jitter and itl:
            itl *= 1.0 + self._profile.jitter * (2.0 * self._rng.random() - 1.0)
        return itl

    async def batches(self, tokens: int, max_batch: int, cut: int = -1, stall_before: int = -1,
                      stall_s: float = 0.0) -> AsyncIterator[tuple[int, int]]:
        """Yield ``(start, end)``: tokens ``start..end-1`` are due now, send them together.

        A batch never crosses ``cut`` (so a fault can hit right after token ``cut - 1``)
        and never holds more than ``max_batch`` tokens. ``stall_s`` is added before token
        ``stall_before``.
        """
        loop = asyncio.get_running_loop()
        due = self._first_due + (stall_s if stall_before == 0 else 0.0)
        start = 0
        while start < tokens:
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif start:
                await asyncio.sleep(0)  # behind schedule or fast mode: let other streams run
            now = loop.time()
            end = start
            while True:
                end += 1  # token end-1 is due: include it
                if end == tokens:
                    break
                due += self._interval() + (stall_s if end == stall_before else 0.0)
                if due > now or end - start >= max_batch or end == cut:
                    break
            if self._ticket is not None:  # None: outside the scheduler (tests of the clock)
                due += await self._state.scheduler.grow(self._ticket, end - start)
            yield start, end
            start = end
