"""Garbage collection off the measurement.

CPython's cyclic collector runs when allocations outnumber deallocations by a threshold
(700 by default, for the youngest generation), and a full (generation-2) collection walks
every object alive: with a run's prompts, records and connections that is up to ~5 ms,
and it lands inside a burst of reads, where it delays every timestamp behind it.

For a level's measured phase, :func:`quiet_gc`:

- collects once and ``gc.freeze()``-s what setup allocated (target, prompts, connections,
  warm-up leftovers): those objects are never walked again while the level runs;
- raises the thresholds for the level's size (:func:`thresholds_for`): collections of the
  youngest generation come every ~100 net allocations per stream instead of every 700 in
  all, and older generations rarely;
- restores the thresholds (and unfreezes) afterwards, also when the level fails or is
  cancelled. If something else had frozen objects before, they stay frozen (ours with
  them: ``gc`` cannot tell them apart).

Cycles made during the level are still collected (the collector stays on). Opt out with
``sweep(..., quiet_gc=False)`` (``RunConfig.quiet_gc``), e.g. to measure the collector.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

from .load import Load, connections_needed

YOUNG_PER_STREAM = 100  # net container allocations per stream in flight between collections
YOUNG_MAX = 50_000  # at most: a young collection then walks ~50k objects, ~1 ms
OLDER = (20, 100)  # generation 1 and 2 thresholds (CPython's defaults: 10, 10)


def thresholds_for(load: Load) -> tuple[int, int, int]:
    """The collector's thresholds while ``load`` is measured (never below the defaults)."""
    young = min(YOUNG_MAX, max(700, YOUNG_PER_STREAM * connections_needed(load)))
    return young, *OLDER


@contextlib.contextmanager
def quiet_gc(load: Load, enabled: bool = True) -> Iterator[None]:
    """Setup frozen and thresholds raised for ``load`` inside the block; restored after.
    ``enabled`` False: nothing changes."""
    if not enabled:
        yield
        return
    saved = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    gc.collect()  # garbage left by setup is freed, not frozen
    gc.freeze()
    gc.set_threshold(*thresholds_for(load))
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        if not frozen_before:
            gc.unfreeze()
