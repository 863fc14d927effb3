"""How a level is split over N workers, with no coordinator on the hot path.

- Closed loop (concurrency C): worker i runs ⌊C/N⌋ streams, plus one if i < C mod N:
  its stream j is stream g = i + j·N of the level (:meth:`Share.request_index`), which
  starts g/C of the way through a ramp-up, as in one process.
  A request count R (and the warm-up count) is split in proportion to the streams,
  by cumulative rounding, so the shares add up to exactly R. ``max_rate`` likewise.
  Requests started during the ramp-up are not counted in R, by each worker as by one
  process.
- Open loop: every worker walks the same seeded global schedule (ramped, with a
  ramp-up) and sends arrival k when k mod N == i (:class:`~loadgen.engine.Share`), so
  together they send exactly the one-process schedule. A request count R means
  arrivals E..E+R−1, E being the arrivals due in the ramp-up (none without one):
  worker i's share is the number of those k with k mod N == i. ``max_in_flight`` is
  split like streams (at least 1 each: a worker with no room would drop its whole share).

A worker whose share of a level's measured requests is empty (C < N, or R < N) sits
that level out.
"""

from __future__ import annotations

import dataclasses
import itertools

from ..engine import Share
from ..load import ArrivalRate, ConstantConcurrency, Load, StopRule, ramped


def even_share(total: int, share: Share) -> int:
    """⌊total/N⌋, plus one for the first total mod N workers."""
    return total // share.count + (1 if share.index < total % share.count else 0)


def proportional_share(total: int, part: int, whole: int, before: int) -> int:
    """Worker's part of ``total`` when it holds ``part`` of ``whole`` units and earlier
    workers hold ``before``: cumulative rounding, so the parts sum to ``total``."""
    return (total * (before + part)) // whole - (total * before) // whole


def worker_level(load: Load, stop: StopRule, share: Share) -> tuple[Load, StopRule] | None:
    """Worker ``share``'s load and stop rule for a level; None when its share is empty."""
    if isinstance(load, ConstantConcurrency):
        return _closed_loop(load, stop, share)
    return _open_loop(load, stop, share)


def _closed_loop(load: ConstantConcurrency, stop: StopRule,
                 share: Share) -> tuple[Load, StopRule] | None:
    streams = even_share(load.concurrency, share)
    if streams == 0:
        return None
    before = sum(even_share(load.concurrency, Share(j, share.count)) for j in range(share.index))

    def part(total: int) -> int:
        return proportional_share(total, streams, load.concurrency, before)

    requests = part(stop.requests) if stop.requests is not None else None
    if requests == 0:
        return None
    max_rate = load.max_rate * streams / load.concurrency if load.max_rate else None
    return (ConstantConcurrency(streams, max_rate),
            dataclasses.replace(stop, requests=requests, warmup=part(stop.warmup)))


def ramp_arrivals(load: ArrivalRate, ramp_up_s: float) -> int:
    """How many arrivals of the level's (ramped) schedule are due during its ramp-up."""
    ramp_ns = round(ramp_up_s * 1e9)
    return sum(1 for _ in itertools.takewhile(lambda offset: offset < ramp_ns,
                                              ramped(load.offsets_ns(), ramp_ns)))


def _open_loop(load: ArrivalRate, stop: StopRule, share: Share) -> tuple[Load, StopRule] | None:
    requests = None
    if stop.requests is not None:
        before = ramp_arrivals(load, stop.ramp_up_s)  # sent by their workers, not counted
        requests = even_share(before + stop.requests, share) - even_share(before, share)
    if requests == 0:
        return None
    cap = load.max_in_flight
    if cap is not None:
        load = dataclasses.replace(load, max_in_flight=max(1, even_share(cap, share)))
    return load, dataclasses.replace(stop, requests=requests, warmup=even_share(stop.warmup, share))
