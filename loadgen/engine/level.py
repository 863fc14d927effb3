"""One phase of a level while it runs: what may still start, and which record a request gets.

A phase is a level's warm-up or its measured part. Both load models
(:mod:`~loadgen.engine.closed_loop`, :mod:`~loadgen.engine.open_loop`) ask the same
:class:`Level` before every request whether it may start (the request limit, the stop
deadline, a stop), count it when it does, and take its prompt and request id from it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..clock import MONOTONIC, Clock
from ..load import Load, StopRule
from ..metrics import LevelMetrics
from ..record import Prompt, RequestRecord
from ..slo import SLO, SLOCounts
from ..targets.base import ChainingTarget, PreparedRequest, PreparingTarget, Target
from ..workload.prompts import Session
from .control import RunControl
from .share import RequestIds, Share
from .tally import RecordSink, Tally

# A request built ahead of its due time: its session (None: a single prompt), prompt,
# record, and the target's prepared request.
Upcoming = tuple[Session | None, Prompt, RequestRecord, PreparedRequest | None]


class Prompts(Protocol):
    """Where prompts come from, by run-wide request index: a
    :class:`~loadgen.workload.prompts.PromptSource` (the same prompt for an index in every
    process), or one process's :class:`~loadgen.workload.prompts.PromptStream` (the same,
    made ahead; a trace's prompts in order)."""

    def prompt(self, index: int) -> Prompt | Session: ...


@dataclass(frozen=True)
class LevelRun:
    """How one process runs its part of a level (defaults: all of it, in this process)."""

    control: RunControl = field(default_factory=RunControl)
    ids: RequestIds = field(default_factory=RequestIds)
    share: Share = Share()
    keep_records: bool = False
    slos: tuple[SLO, ...] = ()  # judged on every measured request
    sinks: tuple[RecordSink, ...] = ()  # exports: see every measured request
    clock: Clock = MONOTONIC
    quiet_gc: bool = True  # setup frozen, thresholds raised while measuring (gcpolicy)
    # Called as each measured request (not one of the ramp-up) starts: a worker counts
    # them where its parent can read the count even after the worker was killed.
    on_start: Callable[[], None] | None = None


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1e9)


class Level:
    """State of one running phase. ``measured``: the level's measured phase (its request
    limit, duration, ramp-up, records); else its warm-up (``stop.warmup`` requests).
    ``whole``: the whole level when ``load`` is this process's share of it (workers)."""

    def __init__(self, target: Target, load: Load, stop: StopRule, prompts: Prompts,
                 how: LevelRun, measured: bool, metrics: LevelMetrics | None = None,
                 slo: SLOCounts | None = None, whole: Load | None = None) -> None:
        self.target = target
        self.load = load
        self.whole = whole or load
        self.prompts = prompts
        self.how = how
        self.clock = how.clock
        self.limit = (stop.requests_for(load) if measured else stop.warmup) or None
        self.duration_ns = _ns(stop.duration_s) if measured else None
        # Ramp-up: requests due before its end are sent but neither tallied nor counted
        # towards the limit.
        self.ramp_ns = round(stop.ramp_up_s * 1e9) if measured else 0
        self.tally = (Tally(metrics, how.slos, how.sinks, how.keep_records, slo) if measured
                      else Tally(metrics))
        self.issued = 0  # requests started (and, open loop, dropped)
        self.ramp_issued = 0  # of which due during the ramp-up
        self.in_flight = 0
        self.start_ns = 0  # set by begin()
        self.deadline_ns: int | None = None  # no request starts at or after it
        self.stopping = False
        self.stopped = asyncio.Event()
        self.grace_s = stop.graceful_stop_s
        # Checked once: isinstance against a runtime Protocol costs ~100 µs.
        self.preparing = isinstance(target, PreparingTarget)
        self.chaining = isinstance(target, ChainingTarget)  # the closed loop's fast path
        self.on_start = how.on_start if measured else None

    # -- the phase's time line --------------------------------------------------------------
    def begin(self, start_ns: int) -> None:
        """The phase starts at ``start_ns``: its ramp-up ends and its stop deadline falls
        (ramp-up + duration) relative to that instant."""
        self.start_ns = start_ns
        self.tally.ramp_end_ns = start_ns + self.ramp_ns if self.ramp_ns else 0
        if self.duration_ns is not None:
            self.deadline_ns = start_ns + self.ramp_ns + self.duration_ns

    def begin_stop(self, grace_s: float | None = None) -> None:
        """No new request starts; ``grace_s`` lowers the graceful-stop period (0: Ctrl-C)."""
        if grace_s is not None:
            self.grace_s = min(self.grace_s, grace_s)
        self.stopping = True
        self.stopped.set()

    def may_start(self) -> bool:
        """May another request start now? Not after a stop, past the deadline, or once the
        limit of requests (those due in the ramp-up not counted) has started."""
        if self.stopping:
            return False
        if self.limit is not None and self.issued - self.ramp_issued >= self.limit:
            return False
        return self.deadline_ns is None or self.clock.now_ns() < self.deadline_ns

    def count_issued(self, intended_ns: int) -> None:
        """A request starts (or is dropped): it counts towards the limit unless it is due in
        the ramp-up."""
        self.issued += 1
        if intended_ns < self.tally.ramp_end_ns:
            self.ramp_issued += 1
        elif self.on_start is not None:
            self.on_start()

    # -- prompts and records ----------------------------------------------------------------
    def next_item(self) -> Prompt | Session:
        """The next prompt (or session) of this process's share, by run-wide prompt index
        (one per session: its later turns take request ids, not prompts)."""
        ids = self.how.ids
        ids.prompts += 1
        return self.prompts.prompt(self.how.share.request_index(ids.prompts - 1))

    def record_for(self, prompt: Prompt) -> RequestRecord:
        """A new record with the next request id (on the wire) and the prompt's facts."""
        index = self.how.share.request_index(self.how.ids.value)
        self.how.ids.value += 1
        return RequestRecord(input_tokens=prompt.input_tokens,
                             input_tokens_exact=prompt.input_tokens_exact,
                             tag=prompt.tag, request_id=index + 1,
                             session=prompt.session, turn=prompt.turn,
                             max_tokens=prompt.max_tokens)

    def new_record(self, prompt: Prompt, intended_ns: int) -> RequestRecord:
        """Count a request that starts now, due at ``intended_ns``, and make its record."""
        self.count_issued(intended_ns)
        rec = self.record_for(prompt)
        rec.intended_ns = intended_ns
        return rec

    def prepare_next(self) -> Upcoming:
        """A stream's next request, built before it is due: prompt (a session's first
        turn), record (its id is on the wire) and, when the target can, the request itself
        (body, signature, bytes). It is counted as issued only when it starts; one left
        over at the stop is never sent."""
        session, prompt = first_turn(self.next_item())
        rec = self.record_for(prompt)
        prepared = None
        if self.preparing:
            try:
                prepared = self.target.prepare(prompt, rec)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - sent unprepared, where a failure becomes data
                prepared = None
        return session, prompt, rec, prepared


def first_turn(item: Prompt | Session) -> tuple[Session | None, Prompt]:
    """A single prompt, or a multi-turn session and the prompt of its first turn."""
    if isinstance(item, Session):
        return item, item.prompt(1, ())
    return None, item
