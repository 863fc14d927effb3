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

Nothing here does I/O: this is what the CLI, the run configuration and worker processes
share. The engine runs these models: :mod:`loadgen.engine.closed_loop`,
:mod:`loadgen.engine.open_loop`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator, Union

from .errors import ConfigError
from .workload.trace import TraceReplay

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


Load = Union[ConstantConcurrency, ArrivalRate, TraceReplay]


@dataclass(frozen=True)
class StopRule:
    """When a level ends. With both ``requests`` and ``duration_s``, whichever comes first;
    with neither, each level runs :func:`default_requests` (at least 4 waves of its
    concurrency).

    ``requests`` and ``duration_s`` count *measured* requests/time; ``warmup``
    requests are sent first and excluded from metrics. At the stop point no new
    request starts; in-flight ones get ``graceful_stop_s`` to finish, then are
    cancelled and counted incomplete.
    """

    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    graceful_stop_s: float = 30.0
    # Streams start spread over the ramp-up (rates ramp linearly); requests started during
    # it are sent but not measured, and ``requests``/``duration_s`` count from its end.
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        if self.requests is not None and self.requests < 1:
            raise ConfigError(f"--requests must be >= 1 (got {self.requests})")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"--duration must be > 0 seconds (got {self.duration_s})")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0 (got {self.warmup})")
        if self.ramp_up_s < 0:
            raise ConfigError(f"--ramp-up must be >= 0 seconds (got {self.ramp_up_s})")
        if self.graceful_stop_s < 0:
            raise ConfigError(f"--graceful-stop must be >= 0 (got {self.graceful_stop_s})")

    def requests_for(self, load: Load) -> int | None:
        """Measured requests of one level (None: the duration ends it)."""
        if self.requests is not None:
            return self.requests
        return None if self.duration_s is not None else default_requests(load)


def ramped(offsets: Iterator[int], ramp_ns: int) -> Iterator[int]:
    """Open-loop offsets with the rate ramping linearly from 0 over ``ramp_ns``.

    A time change: the request due at ``t`` in the steady schedule is due when the ramped
    rate has delivered as many, ``sqrt(2·ramp·t)`` during the ramp and ``t + ramp/2``
    after it, so Poisson arrivals stay Poisson (with a rising rate).
    """
    for offset in offsets:
        if not ramp_ns:
            yield offset
        elif 2 * offset < ramp_ns:
            yield round(math.sqrt(2 * ramp_ns * offset))
        else:
            yield offset + ramp_ns // 2


# A closed-loop level measures steady state only after several waves of its concurrency:
# with fewer requests the ramp-down tail (streams idling while the last ones finish) is
# a large share of the window and throughput is under-reported.
MIN_WAVES = 4
DEFAULT_REQUESTS = 20


def streams_of(load: Load) -> int | None:
    """Concurrent streams of a level: its concurrency, or an open loop's in-flight cap."""
    return load.concurrency if isinstance(load, ConstantConcurrency) else load.max_in_flight


def connections_needed(load: Load) -> int:
    """Connections a level will use at once: its concurrency, its in-flight cap, or (open
    loop without a cap) one second's worth of arrivals, at most 256."""
    streams = streams_of(load)
    if streams is not None:
        return streams
    return max(1, min(256, math.ceil(load.rate)))


def default_requests(load: Load) -> int:
    """Requests per level when neither a count nor a duration is given (a trace: all)."""
    if isinstance(load, TraceReplay):
        return len(load.rows)
    return max(DEFAULT_REQUESTS, MIN_WAVES * (streams_of(load) or 0))


def waves_warning(load: Load, requests: int | None) -> str | None:
    """A warning when ``requests`` is fewer than :data:`MIN_WAVES` waves of the level
    (a single stream has no ramp-down tail, so it is never warned about)."""
    streams = streams_of(load)
    if requests is None or not streams or streams < 2 or requests >= MIN_WAVES * streams:
        return None
    return (f"{load.label}: {requests} requests is under {MIN_WAVES} waves of {streams} "
            f"streams; throughput will be under-reported (use --requests "
            f"{MIN_WAVES * streams} or more, or --duration)")
