"""The simulated engine's scheduler: running slots, a waiting queue and a KV-cache budget.

As vLLM's V1 scheduler (first come, first served, recompute preemption):

* **Admission.** A request waits in FIFO order until one of ``max_num_seqs`` slots is free
  *and* the KV cache has room for its prompt (``num_gpu_blocks × block_size`` tokens).
  The head of the queue blocks the rest, as vLLM's FCFS policy does.
* **Growth.** Every generated token takes one more KV slot. A running request that finds
  the cache full is **preempted**: it frees all its KV tokens, goes back to the *front* of
  the queue, and when admitted again recomputes its prompt and the tokens generated so far
  (a prefill of that length, :meth:`SimProfile.ttft_for`) before its next token. Each
  preemption counts in ``vllm:num_preemptions_total``. (vLLM picks the newest running
  request as the victim; here the request that needs the room yields it, which keeps
  the model to one task per request. The counts and the KV curve behave alike.)
* A request running alone is never preempted (vLLM guarantees one max-length request fits).

So KV usage, ``num_requests_waiting`` and preemptions follow from the load: with prompts
of ``p`` tokens and answers of ``n``, about ``capacity / (p + n)`` requests fit at once.
"""

from __future__ import annotations

import asyncio
from collections import deque

from .profile import SimProfile


class Ticket:
    """One request's place in the scheduler: its prompt, what it generated, what it holds."""

    __slots__ = ("prompt_tokens", "generated", "held", "running", "_admitted")

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.generated = 0
        self.held = 0  # KV tokens held now (0 while waiting)
        self.running = False
        self._admitted: asyncio.Future | None = None

    @property
    def need(self) -> int:
        """KV tokens it must hold to run: its prompt and everything generated so far."""
        return self.prompt_tokens + self.generated


class KvScheduler:
    """Slots, queue and KV budget of one simulated engine (see the module docstring)."""

    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        self.capacity = profile.num_gpu_blocks * profile.block_size
        self.running = 0
        self.kv_tokens = 0
        self.preemptions = 0
        self._queue: deque[Ticket] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def admit(self, ticket: Ticket, front: bool = False) -> None:
        """Wait (FIFO; ``front``: a preempted request goes first) until ``ticket`` runs."""
        ticket._admitted = asyncio.get_running_loop().create_future()
        (self._queue.appendleft if front else self._queue.append)(ticket)
        self._schedule()
        try:
            await ticket._admitted
        except asyncio.CancelledError:
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._schedule()  # it may have blocked the head of the queue
            raise

    def _fits(self, ticket: Ticket) -> bool:
        return self.running == 0 or self.kv_tokens + ticket.need <= self.capacity

    def _schedule(self) -> None:
        queue = self._queue
        while queue and self.running < self.profile.max_num_seqs and self._fits(queue[0]):
            ticket = queue.popleft()
            self.running += 1
            ticket.running = True
            ticket.held = ticket.need
            self.kv_tokens += ticket.held
            if ticket._admitted is not None and not ticket._admitted.done():
                ticket._admitted.set_result(None)

    def leave(self, ticket: Ticket) -> None:
        """The request stops running (finished, failed, cancelled or preempted)."""
        if ticket.running:
            ticket.running = False
            self.running -= 1
            self.kv_tokens -= ticket.held
            ticket.held = 0
            self._schedule()

    async def grow(self, ticket: Ticket, tokens: int) -> float:
        """``tokens`` more generated tokens need KV room; returns the seconds lost to a
        preemption (0.0 when they fit)."""
        if self.kv_tokens + tokens <= self.capacity or self.running <= 1:
            self._take(ticket, tokens)
            return 0.0
        loop = asyncio.get_running_loop()
        began = loop.time()
        self.preemptions += 1
        self.leave(ticket)
        await self.admit(ticket, front=True)
        await asyncio.sleep(self.profile.ttft_for(ticket.need))  # recompute the prefix
        self._take(ticket, tokens)
        return loop.time() - began

    def _take(self, ticket: Ticket, tokens: int) -> None:
        ticket.generated += tokens
        ticket.held += tokens
        self.kv_tokens += tokens
