"""``--profile saturation``: find the server's range, then measure rates across it.

As GuideLLM's "sweep" profile does: a single-stream level (the lowest useful rate) and an
unthrottled level (``concurrency`` streams at once: the highest rate the server sustains)
measure the bounds; then ``rates`` constant-rate open-loop levels are spaced evenly
strictly between the two request rates. All levels go to one results file. The rate
levels share the connection pool sized for the unthrottled level (``concurrency``).
"""

from __future__ import annotations

from typing import Any, Callable

from .errors import ConfigError
from .load import ArrivalRate, ConstantConcurrency, Load
from .results import RunResult, requests_per_s


def saturation_rates(low_rps: float, high_rps: float, count: int) -> list[float]:
    """``count`` rates evenly spaced strictly between ``low_rps`` and ``high_rps``."""
    if high_rps <= low_rps:
        # The server did not get faster with more streams: measure around its one rate.
        high_rps = low_rps * 1.5
    step = (high_rps - low_rps) / (count + 1)
    return [round(low_rps + step * (i + 1), 4) for i in range(count)]


async def saturation_sweep(target: Any = None, *, rates: int = 5, concurrency: int = 64,
                           on_level: Callable | None = None, **sweep_kwargs) -> RunResult:
    """Bounds first (concurrency 1, then ``concurrency``), then ``rates`` rate levels."""
    from .api import sweep

    if rates < 1:
        raise ConfigError(f"--profile-rates must be >= 1 (got {rates})")
    if concurrency < 2:
        raise ConfigError(f"--saturation-concurrency must be >= 2 (got {concurrency})")
    # sweep() walks this list as it grows: the rate levels are added once both bounds
    # are measured.
    loads: list[Load] = [ConstantConcurrency(1), ConstantConcurrency(concurrency)]
    bounds: list[float] = []

    def level_done(level: Any) -> None:
        if on_level:
            on_level(level)
        if len(bounds) < 2:
            bounds.append(requests_per_s(level))
            if len(bounds) == 2 and bounds[0] > 0:
                loads.extend(ArrivalRate(rate) for rate in saturation_rates(*bounds, rates))

    return await sweep(target, loads=loads, on_level=level_done, **sweep_kwargs)
