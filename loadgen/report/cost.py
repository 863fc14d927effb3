"""What a million output tokens cost on an instance billed by the hour.

An endpoint bills for every hour it exists, busy or idle, so the cost of a token
is the hourly price spread over the tokens the instance produced in that hour at
the measured rate:

    $ per 1M output tokens = price_per_hour / (output_tokens_per_s × 3600) × 10⁶

The rate is the level's aggregate output tokens/s (all concurrent streams
together), not the per-request decode rate. The L4 study, at $1.1267/h:
45.6 tok/s → $6.86, 619.1 tok/s → $0.51.
"""

from __future__ import annotations

import math

from ..errors import ConfigError

SECONDS_PER_HOUR = 3600
TOKENS_PER_UNIT = 1_000_000


def check_price(price_per_hour: float | None) -> float | None:
    """Validate an hourly price given by a user (None means 'no price: no cost column')."""
    if price_per_hour is None:
        return None
    if (isinstance(price_per_hour, bool) or not isinstance(price_per_hour, (int, float))
            or not math.isfinite(price_per_hour) or price_per_hour <= 0):
        raise ConfigError(f"price per hour must be a positive number of dollars, "
                          f"got {price_per_hour!r}")
    return float(price_per_hour)


def cost_per_million_tokens(price_per_hour: float | None,
                            output_tokens_per_s: float | None) -> float | None:
    """Dollars per million output tokens; None when there is no price or no throughput."""
    if price_per_hour is None or not output_tokens_per_s or output_tokens_per_s <= 0:
        return None
    tokens_per_hour = output_tokens_per_s * SECONDS_PER_HOUR
    return price_per_hour / tokens_per_hour * TOKENS_PER_UNIT


def tokens_per_dollar(price_per_hour: float | None,
                      output_tokens_per_s: float | None) -> float | None:
    """Output tokens bought by one dollar at the measured rate (the inverse view)."""
    cost = cost_per_million_tokens(price_per_hour, output_tokens_per_s)
    return None if cost is None else TOKENS_PER_UNIT / cost
