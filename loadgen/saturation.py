"""``--profile saturation``: find the server's range, then measure rates across it.

As GuideLLM's "sweep" profile does: a single-stream level (the lowest useful rate) and an
unthrottled level (``concurrency`` streams at once: the highest rate the server sustains)
measure the bounds; then ``rates`` constant-rate open-loop levels are spaced evenly
strictly between the two request rates. All levels go to one results file. The rate
levels share the connection pool sized for the unthrottled level (``concurrency``).
"""

from __future__ import annotations

from typing import Any, Sequence

from .errors import ConfigError
from .load import ArrivalRate, ConstantConcurrency, Load, StopRule
from .results import RunResult, requests_per_s


def saturation_rates(low_rps: float, high_rps: float, count: int) -> list[float]:
    """``count`` rates evenly spaced strictly between ``low_rps`` and ``high_rps``."""
    if high_rps <= low_rps:
        # The server did not get faster with more streams: measure around its one rate.
        high_rps = low_rps * 1.5
    step = (high_rps - low_rps) / (count + 1)
    return [round(low_rps + step * (i + 1), 4) for i in range(count)]


class SaturationPlan:
    """The profile as a level plan: the two bounds, then ``rates`` rate levels between
    the request rates the bounds measured."""

    def __init__(self, rates: int = 5, concurrency: int = 64) -> None:
        if rates < 1:
            raise ConfigError(f"--profile-rates must be >= 1 (got {rates})")
        if concurrency < 2:
            raise ConfigError(f"--saturation-concurrency must be >= 2 (got {concurrency})")
        self.rates = rates
        self.concurrency = concurrency

    @property
    def planned(self) -> int:
        return 2 + self.rates

    def bounds(self) -> Sequence[Load]:
        return [ConstantConcurrency(self.concurrency)]

    def stop_for(self, load: Load, stop: StopRule) -> StopRule:
        return stop

    def describe(self) -> dict[str, Any] | None:
        return None

    def next_load(self, done: Sequence[Any]) -> Load | None:
        if len(done) < 2:
            return ConstantConcurrency(1 if not done else self.concurrency)
        low, high = requests_per_s(done[0]), requests_per_s(done[1])
        if low <= 0:
            return None  # nothing completed at one stream: no rates to space
        rates = saturation_rates(low, high, self.rates)
        return ArrivalRate(rates[len(done) - 2]) if len(done) - 2 < len(rates) else None


async def saturation_sweep(target: Any = None, *, rates: int = 5, concurrency: int = 64,
                           **sweep_kwargs) -> RunResult:
    """Bounds first (concurrency 1, then ``concurrency``), then ``rates`` rate levels."""
    from .api import sweep

    return await sweep(target, loads=SaturationPlan(rates, concurrency), **sweep_kwargs)
