"""Which level a run measures next: a fixed list, or a profile that decides as it goes.

The runner (:func:`loadgen.api.run_on`) asks its plan for the next load after every
level, handing it the levels measured so far; ``None`` ends the run. A profile
(``--profile saturation``, ``--profile slo-search``) is a plan that reads those
levels to choose the next one; nothing mutates a list the runner walks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

from .engine import LevelResult
from .load import Load, StopRule


class LevelPlan(Protocol):
    def next_load(self, done: Sequence[LevelResult]) -> Load | None:
        """The next level to measure after ``done`` (None: the run is complete)."""

    def stop_for(self, load: Load, stop: StopRule) -> StopRule:
        """How long ``load`` runs, given the run's stop rule."""

    def bounds(self) -> Sequence[Load]:
        """The loads that size the connection pool (the most streams it may ask for)."""

    def describe(self) -> dict[str, Any] | None:
        """The results file's ``profile`` object (None: nothing to say)."""

    @property
    def planned(self) -> int:
        """Levels it expects to run at most (progress display)."""


class FixedLevels:
    """The levels of ``--concurrency``/``--rate``/a trace, in order."""

    def __init__(self, loads: Sequence[Load]) -> None:
        self.loads = loads

    def next_load(self, done: Sequence[LevelResult]) -> Load | None:
        return self.loads[len(done)] if len(done) < len(self.loads) else None

    def stop_for(self, load: Load, stop: StopRule) -> StopRule:
        return stop

    def bounds(self) -> Sequence[Load]:
        return self.loads

    def describe(self) -> dict[str, Any] | None:
        return None

    @property
    def planned(self) -> int:
        return len(self.loads)


def as_plan(levels: Sequence[Load] | LevelPlan) -> LevelPlan:
    return levels if hasattr(levels, "next_load") else FixedLevels(levels)  # type: ignore


def profile_plan(workload: Any, loads: Sequence[Load],
                 ceiling: float | None = None) -> LevelPlan | None:
    """The plan ``workload.profile`` names (None: no profile); ``loads``: the levels the
    options gave (slo-search starts from the first); ``ceiling``: the most concurrency a
    concurrency search may probe (an MCP server's limit; None: no limit)."""
    if workload.profile == "saturation":
        from .saturation import SaturationPlan

        return SaturationPlan(workload.profile_rates, workload.saturation_concurrency)
    if workload.profile == "slo-search":
        from .knee import KneePlan, knee_search

        search = knee_search(workload, loads)
        if ceiling is not None and search.mode == "concurrency":
            search = dataclasses.replace(search, ceiling=ceiling)
        return KneePlan(search)
    return None
