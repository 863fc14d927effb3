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

from ..engine import Share
from ..load import Load, StopRule, even_share, proportional_share, ramp_arrivals

__all__ = ["worker_level", "even_share", "proportional_share", "ramp_arrivals"]


def worker_level(load: Load, stop: StopRule, share: Share) -> tuple[Load, StopRule] | None:
    """Worker ``share``'s load and stop rule for a level; None when its share is empty
    (each load splits itself: :meth:`loadgen.load.Load.split`)."""
    return load.split(stop, share)
