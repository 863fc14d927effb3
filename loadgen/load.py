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

Every load answers for itself (the :class:`Load` protocol): its label, the streams and
connections it needs, its default request count, its share on one of N workers, and
which engine loop runs it; nobody else asks which kind of load it is. :class:`Levels`
declares the level options (``--concurrency``, ``--rate``, ...) and builds the loads.

Nothing here does I/O: this is what the CLI, the run configuration and worker processes
share. The engine runs these models: :mod:`loadgen.engine.closed_loop`,
:mod:`loadgen.engine.open_loop`.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol

from .errors import ConfigError
from .option import option

if TYPE_CHECKING:
    from .engine.share import Share

ARRIVALS = ("constant", "poisson")
CLOSED_LOOP, OPEN_LOOP = "closed", "open"  # the engine loop that runs a load
# One process's budget when ``workers="auto"`` sizes a run (BENCHMARKS.md, "Fast path"):
# what one process keeps accurate is an event rate, ~25k token events/s (256 streams at a
# 10 ms ITL: TTFT error p99 1.6x the raw client's; 1024 at 40 ms: 0.9x), and 512 streams
# at 10 ms took one process to 25-190 ms p99 where two workers kept 7-17 ms. Streams stand
# in for events/s (the ITL is not known before the run), sized for a 10 ms ITL. Open loop:
# not measured; an arrival rate whose in-flight requests are of that order for ~3 s streams.
STREAMS_PER_WORKER = 256
ARRIVALS_PER_S_PER_WORKER = 100.0
# A closed-loop level measures steady state only after several waves of its concurrency:
# with fewer requests the ramp-down tail (streams idling while the last ones finish) is
# a large share of the window and throughput is under-reported.
MIN_WAVES = 4
DEFAULT_REQUESTS = 20


class Load(Protocol):
    """A load model, as the engine, the run and the workers ask about it."""

    @property
    def label(self) -> str: ...  # "concurrency 4", "poisson rate 2/s", "trace x1"

    @property
    def streams(self) -> int | None: ...  # concurrent streams or in-flight cap; None: no cap

    loop: str  # CLOSED_LOOP or OPEN_LOOP: which engine loop runs it

    def describe(self) -> dict: ...  # the results file's ``load`` object

    def connections_needed(self) -> int: ...

    def default_requests(self) -> int: ...

    def workers_needed(self) -> int: ...  # for ``workers="auto"``

    def split(self, stop: "StopRule", share: "Share") -> "tuple[Load, StopRule] | None": ...


def even_share(total: int, share: "Share") -> int:
    """⌊total/N⌋, plus one for the first total mod N workers."""
    return total // share.count + (1 if share.index < total % share.count else 0)


def proportional_share(total: int, part: int, whole: int, before: int) -> int:
    """Worker's part of ``total`` when it holds ``part`` of ``whole`` units and earlier
    workers hold ``before``: cumulative rounding, so the parts sum to ``total``."""
    return (total * (before + part)) // whole - (total * before) // whole


def _waves_default(streams: int | None) -> int:
    return max(DEFAULT_REQUESTS, MIN_WAVES * (streams or 0))


def _open_loop_connections(load) -> int:
    """An open loop's connections: its in-flight cap, else one second's worth of
    arrivals, at most 256."""
    if load.max_in_flight is not None:
        return load.max_in_flight
    return max(1, min(256, math.ceil(load.rate)))


@dataclass(frozen=True)
class ConstantConcurrency:
    concurrency: int
    max_rate: float | None = None  # requests/s cap across all workers
    # At least this many measured requests, whatever the stop rule's count: a saturation
    # probe must run several waves of its streams to measure a rate.
    min_requests: int | None = None
    loop = CLOSED_LOOP

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

    @property
    def streams(self) -> int:
        return self.concurrency

    def connections_needed(self) -> int:
        return self.concurrency

    def default_requests(self) -> int:
        return _waves_default(self.concurrency)

    def workers_needed(self) -> int:
        return -(-self.concurrency // STREAMS_PER_WORKER)

    def split(self, stop: "StopRule", share: "Share") -> "tuple[Load, StopRule] | None":
        """Worker ``share``'s streams (an even share) and its part of the request, warm-up
        and rate counts (in proportion to its streams); None when it has nothing to do."""
        from .engine.share import Share

        streams = even_share(self.concurrency, share)
        if streams == 0:
            return None
        before = sum(even_share(self.concurrency, Share(j, share.count))
                     for j in range(share.index))

        def part(total: int) -> int:
            return proportional_share(total, streams, self.concurrency, before)

        requests = part(stop.requests) if stop.requests is not None else None
        if requests == 0:
            return None
        max_rate = self.max_rate * streams / self.concurrency if self.max_rate else None
        return (ConstantConcurrency(streams, max_rate),
                dataclasses.replace(stop, requests=requests, warmup=part(stop.warmup)))


@dataclass(frozen=True)
class ArrivalRate:
    rate: float  # requests per second
    arrival: str = "constant"
    max_in_flight: int | None = None
    seed: int = 0
    loop = OPEN_LOOP

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

    @property
    def streams(self) -> int | None:
        return self.max_in_flight

    def connections_needed(self) -> int:
        return _open_loop_connections(self)

    def default_requests(self) -> int:
        return _waves_default(self.max_in_flight)

    def workers_needed(self) -> int:
        if self.max_in_flight:  # capped: at most that many streams
            return -(-self.max_in_flight // STREAMS_PER_WORKER)
        return int(-(-self.rate // ARRIVALS_PER_S_PER_WORKER))

    def split(self, stop: "StopRule", share: "Share") -> "tuple[Load, StopRule] | None":
        """Every worker walks the same schedule and sends arrival k when k mod N == its
        index: its request count is the number of those k among the measured arrivals."""
        requests = None
        if stop.requests is not None:
            before = ramp_arrivals(self, stop.ramp_up_s)  # sent by their workers, not counted
            requests = even_share(before + stop.requests, share) - even_share(before, share)
        if requests == 0:
            return None
        load = self
        if self.max_in_flight is not None:
            load = dataclasses.replace(self, max_in_flight=max(1, even_share(self.max_in_flight,
                                                                             share)))
        return load, dataclasses.replace(stop, requests=requests,
                                         warmup=even_share(stop.warmup, share))


def ramp_arrivals(load: ArrivalRate, ramp_up_s: float) -> int:
    """How many arrivals of the level's (ramped) schedule are due during its ramp-up."""
    ramp_ns = round(ramp_up_s * 1e9)
    count = 0
    for offset in ramped(load.offsets_ns(), ramp_ns):
        if offset >= ramp_ns:
            return count
        count += 1
    return count


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

    requests: int | None = option(None, "Load (per level)", "Measured requests per level.",
                                  metavar="REQUESTS", low=1,
                                  none_means="4 waves of the concurrency, at least 20, if "
                                             "no --duration")
    duration_s: float | None = option(None, "Load (per level)", "Seconds per level.",
                                      metavar="S", low=0, low_open=True, flag="--duration",
                                      none_means="end by --requests")
    warmup: int = option(0, "Load (per level)", "Warm-up requests per level, excluded from "
                         "metrics.", metavar="REQUESTS", low=0)
    graceful_stop_s: float = option(30.0, "Load (per level)", "Seconds in-flight requests "
                                    "get after the stop point.", metavar="S", low=0,
                                    flag="--graceful-stop")
    # Streams start spread over the ramp-up (rates ramp linearly); requests started during
    # it are sent but not measured, and ``requests``/``duration_s`` count from its end.
    ramp_up_s: float = option(0.0, "Load (per level)", "Seconds over which each level's "
                              "streams start (rates ramp linearly); requests started "
                              "meanwhile are not measured.", metavar="S", low=0,
                              flag="--ramp-up")

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
        """Measured requests of one level (None: the duration ends it); a load's own
        ``min_requests`` raises the count."""
        least = getattr(load, "min_requests", None) or 0
        if self.requests is not None:
            return max(self.requests, least)
        return None if self.duration_s is not None else load.default_requests()


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


def streams_of(load: Load) -> int | None:
    """Concurrent streams of a level: its concurrency, or an open loop's in-flight cap."""
    return load.streams


def connections_needed(load: Load) -> int:
    """Connections a level will use at once: its concurrency, its in-flight cap, or (open
    loop without a cap) one second's worth of arrivals, at most 256."""
    return load.connections_needed()


def default_requests(load: Load) -> int:
    """Requests per level when neither a count nor a duration is given (a trace: all;
    else at least :data:`MIN_WAVES` waves of its streams, at least :data:`DEFAULT_REQUESTS`)."""
    return load.default_requests()


def waves_warning(load: Load, requests: int | None) -> str | None:
    """A warning when ``requests`` is fewer than :data:`MIN_WAVES` waves of the level
    (a single stream has no ramp-down tail, so it is never warned about)."""
    streams = streams_of(load)
    if requests is None or not streams or streams < 2 or requests >= MIN_WAVES * streams:
        return None
    return (f"{load.label}: {requests} requests is under {MIN_WAVES} waves of {streams} "
            f"streams; throughput will be under-reported (use --requests "
            f"{MIN_WAVES * streams} or more, or --duration)")


_L = "Load (per level)"


@dataclass(frozen=True)
class Levels:
    """The level options: closed loop (``concurrency``) or open loop (``rate``), one
    level per value, and what shapes them. Neither: one closed-loop stream."""

    concurrency: tuple[int, ...] = option((), _L, "Closed loop: concurrent streams (sweep: "
                                          "one level per value).", metavar="STREAMS[,STREAMS...]", item=int,
                                          low=1, none_means="1")
    rate: tuple[float, ...] = option((), _L, "Open loop: arrival rate in requests/s "
                                     "(sweep: one level per value).", metavar="REQ/S[,REQ/S...]", item=float,
                                     low=0, low_open=True, none_means="closed loop",
                                     hint="for N requests at once use --concurrency N "
                                          "--requests N")
    arrival: str = option("constant", _L, "Open-loop arrival process.", choices=ARRIVALS)
    max_in_flight: int | None = option(None, _L, "Open loop: cap on requests in flight; "
                                       "requests due while full are counted as dropped.",
                                       metavar="REQUESTS", low=1, none_means="no cap")
    max_rate: float | None = option(None, _L, "Closed loop: cap on requests/s.",
                                    metavar="REQ/S", low=0, low_open=True, none_means="no cap")

    def loads(self, seed: int = 0) -> list[Load]:
        """One load per level; one-line errors for options that don't go together."""
        if self.concurrency and self.rate:
            raise ConfigError("use either --concurrency (closed loop) or --rate (open loop), "
                              "not both")
        if self.rate:
            if self.max_rate is not None:
                raise ConfigError("--max-rate caps closed-loop runs; with --rate the rate is "
                                  "the schedule")
            return [ArrivalRate(r, self.arrival, self.max_in_flight, seed) for r in self.rate]
        if self.max_in_flight is not None:
            raise ConfigError("--max-in-flight applies to --rate runs; --concurrency is "
                              "already a cap")
        return [ConstantConcurrency(c, self.max_rate) for c in self.concurrency or (1,)]

    @property
    def count(self) -> int:
        return len(self.rate or self.concurrency or (1,))
