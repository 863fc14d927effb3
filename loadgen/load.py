"""Load models (what to send, when) and stop rules, as plain config.

Named for what they do, like k6 executors:

- :class:`ConstantConcurrency` (closed loop): N workers; each sends its next
  request when its previous one finishes. Optionally capped at ``max_rate``
  requests/s (asyncio-throttle), which delays sends but never reschedules them.
- :class:`ArrivalRate` (open loop): request *i* is due at ``start + offset_i``
  with offsets ``i / rate`` (``constant``) or cumulative exponential gaps
  (``poisson``, seeded). Latency is measured from the due time, so a slow
  server cannot hide behind a late client (coordinated omission). With
  ``max_in_flight``, a request due while the cap is full is *dropped* and counted.

The runner lives in :mod:`loadgen.engine`; nothing here does I/O.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator, Union

from .errors import ConfigError

ARRIVALS = ("constant", "poisson")


@dataclass(frozen=True)
class ConstantConcurrency:
    concurrency: int
    max_rate: float | None = None  # requests/s cap across all workers

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1 (got {self.concurrency})")
        if self.max_rate is not None and self.max_rate <= 0:
            raise ConfigError(f"--max-rate must be > 0 (got {self.max_rate})")

    def describe(self) -> dict:
        return {"mode": "concurrency", "concurrency": self.concurrency, "rate": self.max_rate,
                "arrival": None}

    @property
    def label(self) -> str:
        return f"concurrency {self.concurrency}"


@dataclass(frozen=True)
class ArrivalRate:
    rate: float  # requests per second
    arrival: str = "constant"
    max_in_flight: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.rate < math.inf:
            # "inf" would put every request at the level's start: not an arrival rate. A burst
            # of N requests at once is a closed loop: --concurrency N --requests N.
            raise ConfigError(f"--rate must be a finite number of requests/s > 0 (got "
                              f"{self.rate:g}); for N requests at once use --concurrency N "
                              "--requests N")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"arrival must be one of {', '.join(ARRIVALS)} (got {self.arrival!r})")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ConfigError(f"--max-in-flight must be >= 1 (got {self.max_in_flight})")

    def offsets_ns(self) -> Iterator[int]:
        """Absolute offsets from the level start, in ns: never accumulated from sleeps."""
        if self.arrival == "constant":
            i = 0
            while True:
                yield round(i * 1e9 / self.rate)
                i += 1
        rng = random.Random(self.seed)
        t = 0.0
        while True:
            yield round(t * 1e9)
            t += rng.expovariate(self.rate)

    def describe(self) -> dict:
        return {"mode": "rate", "concurrency": self.max_in_flight, "rate": self.rate,
                "arrival": self.arrival}

    @property
    def label(self) -> str:
        return f"{self.arrival} rate {self.rate:g}/s"


Load = Union[ConstantConcurrency, ArrivalRate]


@dataclass(frozen=True)
class StopRule:
    """When a level ends. With both ``requests`` and ``duration_s``, whichever comes first.

    ``requests`` and ``duration_s`` count *measured* requests/time; ``warmup``
    requests are sent first and excluded from metrics. At the stop point no new
    request starts; in-flight ones get ``graceful_stop_s`` to finish, then are
    cancelled and counted incomplete.
    """

    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    graceful_stop_s: float = 30.0

    def __post_init__(self) -> None:
        if self.requests is None and self.duration_s is None:
            raise ConfigError("give --requests N and/or --duration SECONDS so each level can end")
        if self.requests is not None and self.requests < 1:
            raise ConfigError(f"--requests must be >= 1 (got {self.requests})")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"--duration must be > 0 seconds (got {self.duration_s})")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0 (got {self.warmup})")
        if self.graceful_stop_s < 0:
            raise ConfigError(f"--graceful-stop must be >= 0 (got {self.graceful_stop_s})")
