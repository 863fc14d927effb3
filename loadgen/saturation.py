"""The levels a run walks (:func:`level_plan`), and ``--profile saturation``: find the
server's range, then measure rates across it.

As GuideLLM's "sweep" profile does: a single-stream level (the lowest useful rate) and an
unthrottled level (``concurrency`` streams at once: the highest rate the server sustains)
measure the bounds; then ``rates`` constant-rate open-loop levels are spaced evenly
strictly between the two request rates. All levels go to one results file. The rate
levels share the connection pool sized for the unthrottled level (``concurrency``).
"""

from __future__ import annotations

from typing import Any, Sequence

from .errors import ConfigError
from .load import ArrivalRate, ConstantConcurrency, Load
from .results import requests_per_s


def saturation_rates(low_rps: float, high_rps: float, count: int) -> list[float]:
    """``count`` rates evenly spaced strictly between ``low_rps`` and ``high_rps``."""
    if high_rps <= low_rps:
        # The server did not get faster with more streams: measure around its one rate.
        high_rps = low_rps * 1.5
    step = (high_rps - low_rps) / (count + 1)
    return [round(low_rps + step * (i + 1), 4) for i in range(count)]


def bound_levels(concurrency: int) -> list[Load]:
    """The two bound levels: one stream, then ``concurrency`` streams unthrottled. The
    unthrottled probe runs at least its default request count (several waves of its
    streams) whatever ``--requests`` says: fewer requests than waves measure no rate."""
    if concurrency < 2:
        raise ConfigError(f"--saturation-concurrency must be >= 2 (got {concurrency})")
    probe = ConstantConcurrency(concurrency)
    return [ConstantConcurrency(1),
            ConstantConcurrency(concurrency, min_requests=probe.default_requests())]


class SaturationLevels:
    """The levels of a saturation profile as the run goes: the bounds, then (once both are
    measured) ``rates`` rate levels. The run asks :meth:`next_level` for each level and
    reports each measured one to :meth:`measured`."""

    def __init__(self, bounds: Sequence[Load], rates: int) -> None:
        if rates < 1:
            raise ConfigError(f"--profile-rates must be >= 1 (got {rates})")
        self.planned: list[Load] = list(bounds)
        self.rates = rates
        self._bound_rps: list[float] = []

    @property
    def total(self) -> int:
        return 2 + self.rates

    def next_level(self, index: int) -> Load | None:
        return self.planned[index] if index < len(self.planned) else None

    def measured(self, level: Any) -> None:
        if len(self._bound_rps) < 2:
            self._bound_rps.append(requests_per_s(level))
            if len(self._bound_rps) == 2 and self._bound_rps[0] > 0:
                self.planned.extend(ArrivalRate(rate) for rate in
                                    saturation_rates(*self._bound_rps, self.rates))


class FixedLevels:
    """A run's levels known up front (as :class:`SaturationLevels`, which chooses them as
    the run goes): the run asks :meth:`next_level` and reports to :meth:`measured`."""

    def __init__(self, loads: Sequence[Load]) -> None:
        self.planned = list(loads)
        self.total = len(self.planned)

    def next_level(self, index: int) -> Load | None:
        return self.planned[index] if index < len(self.planned) else None

    def measured(self, level: Any) -> None:
        pass


def level_plan(config: Any) -> Any:
    """The levels ``config`` (a RunConfig) runs: its loads, or a profile's, chosen as the
    run goes (``--profile slo-search``: :class:`loadgen.knee.KneePlan`)."""
    if config.measurement.profile == "saturation":
        return SaturationLevels(config.loads, config.measurement.profile_rates)
    if config.measurement.profile == "slo-search":
        from .knee import KneePlan, knee_search

        return KneePlan(knee_search(config.measurement, config.loads))
    return FixedLevels(config.loads)


def plan_loads(config: Any) -> list[Load]:
    """The loads that size a run's connection pool: its own, and the most streams its
    profile may ask for."""
    plan = level_plan(config)
    return [*config.loads, *(plan.bounds() if hasattr(plan, "bounds") else ())]
