"""``--profile slo-search``: the highest load that still meets every SLO (the knee).

The search probes one level at a time (a level plan, see
:func:`loadgen.saturation.level_plan`): closed-loop concurrency, or open-loop rate with
``--rate-search``. It starts at ``start`` (the
first ``--concurrency``/``--rate``, default 1) and **doubles** until a probe fails, then
**bisects** between the highest passing and the lowest failing load. It stops when the
bracket is within ``precision`` of its lower end (``(high − low) / low ≤ precision``;
concurrency: also when ``high − low ≤ 1``), after ``max_probes`` probes, or when
``--search-ceiling`` (MCP: the server's concurrency limit) passes. When the
first probe already fails, rates halve until one passes (concurrency 1 failing: no knee).

A probe **passes** (:func:`judge`) when, for its level:

* every percentile SLO (``METRIC:pNN<=V``) is met by the level's histogram percentile;
* every per-request SLO (``METRIC<=V``) is met by at least :data:`PASS_RATE` (99 %) of
  the completed requests (the level's reading of a per-request limit: its p99);
* at most :data:`MAX_FAILED` (1 %) of the requests due failed, were cut off, or were
  dropped (open loop: due while the in-flight cap was full);
* its client throughput was steady (:func:`loadgen.timeline.steady_state`), and a
  closed-loop probe ran at least 4 waves (``--duration`` too short fails it).

Each failing probe says which of these it missed. The knee is the highest passing load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .engine import LevelResult
from .errors import ConfigError
from .load import MIN_WAVES, ArrivalRate, ConstantConcurrency, Load
from .slo import SLO
from .server_peaks import peaks

PASS_RATE = 0.99
MAX_FAILED = 0.01
CONCURRENCY, RATE = "concurrency", "rate"


@dataclass(frozen=True)
class KneeSearch:
    slos: tuple[SLO, ...]
    mode: str = CONCURRENCY
    start: float = 1
    precision: float = 0.10
    max_probes: int = 10
    arrival: str = "constant"  # open loop: how requests arrive (--arrival)
    seed: int = 0
    ceiling: float | None = None  # never probe above this (a server's limit); None: none

    def __post_init__(self) -> None:
        if not self.slos:
            raise ConfigError("--profile slo-search needs at least one --slo, e.g. "
                              "--slo ttft_ms:p99<=500")
        if not 0 < self.precision < 1:
            raise ConfigError(f"--search-precision must be in (0, 1), e.g. 0.1 "
                              f"(got {self.precision:g})")
        if self.max_probes < 2:
            raise ConfigError(f"--max-probes must be >= 2 (got {self.max_probes})")
        if not 0 < self.start < math.inf:
            raise ConfigError(f"the search's first load must be > 0 (got {self.start:g})")

    def load(self, value: float) -> Load:
        """A probe: at least :data:`MIN_WAVES` waves of a concurrency whatever the stop
        rule's count (a ``--duration`` too short for them fails the probe)."""
        if self.mode == CONCURRENCY:
            return ConstantConcurrency(int(value), min_requests=MIN_WAVES * int(value))
        return ArrivalRate(round(value, 4), self.arrival, seed=self.seed)


def knee_search(measurement: Any, loads: Sequence[Load] = ()) -> KneeSearch:
    """The search a :class:`~loadgen.measurement.Measurement` describes; its first load
    comes from ``loads`` (the first given --concurrency or --rate), else 1."""
    workload = measurement
    first = loads[0] if loads else None
    mode = RATE if workload.rate_search else CONCURRENCY
    start: float = 1
    if first is not None and mode == RATE and isinstance(first, ArrivalRate):
        start = first.rate
    elif first is not None and mode == CONCURRENCY and isinstance(first, ConstantConcurrency):
        start = first.concurrency
    arrival = first.arrival if isinstance(first, ArrivalRate) else "constant"
    return KneeSearch(tuple(workload.slos), mode, start, workload.search_precision,
                      workload.max_probes, arrival, getattr(first, "seed", 0),
                      measurement.search_ceiling if mode == CONCURRENCY else None)


def load_value(load: Load) -> float:
    return load.concurrency if isinstance(load, ConstantConcurrency) else load.rate


def judge(level: dict[str, Any], slos: Sequence[SLO]) -> list[str]:
    """Why a level (a results-file level) misses the search's bar; [] when it passes."""
    misses = []
    per_slo = {entry["slo"]: entry for entry in (level.get("goodput") or {}).get("per_slo", [])}
    for slo in slos:
        entry = per_slo.get(slo.text, {})
        if slo.percentile is not None:
            if not entry.get("met"):
                misses.append(f"{slo.text}: p{slo.percentile:g} was {entry.get('value')}")
        else:
            rate = entry.get("pass_rate")
            if rate is None or rate < PASS_RATE:
                shown = "no completed request" if rate is None else f"{rate:.1%} of requests"
                misses.append(f"{slo.text}: met by {shown} (need {PASS_RATE:.0%})")
    requests = level["requests"]
    bad = requests["failed"] + requests["incomplete"] + requests.get("dropped", 0)
    due = requests["completed"] + bad
    if due and bad / due > MAX_FAILED:
        misses.append(f"{bad} of {due} requests failed, were cut off or dropped")
    steady = (level.get("timeline") or {}).get("steady") or {}
    if steady.get("steady") is False:
        misses.append(f"unsteady: {steady['reason']}")
    load = level["load"]
    if load["mode"] == CONCURRENCY and requests["completed"] < MIN_WAVES * load["concurrency"]:
        misses.append(f"only {requests['completed']} requests: under {MIN_WAVES} waves of "
                      f"{load['concurrency']} streams (lengthen --duration)")
    return misses


def verdict_inputs(level: LevelResult) -> dict[str, Any]:
    """The parts of a level's results-file dict that :func:`judge` reads (the whole
    :func:`~loadgen.results.level_to_dict` would walk every histogram once more)."""
    c = level.metrics.counts
    requests = {"completed": c.completed, "failed": c.failed, "incomplete": c.incomplete,
                "dropped": c.dropped}
    goodput = (level.slo.to_dict(level.duration_s, level.metrics.hists, c.requests)
               if level.slo is not None else None)
    return {"load": level.load.describe(), "requests": requests, "goodput": goodput,
            "timeline": level.timeline}


class KneePlan:
    """The search as a level plan: asks for each next probe from the ones measured."""

    def __init__(self, search: KneeSearch) -> None:
        self.search = search
        self.probes: list[dict[str, Any]] = []
        self.stopped: str | None = None
        self._chosen: list[Load | None] = []  # the load chosen for each level index

    @property
    def total(self) -> int:
        """Levels it may run, at most (progress display)."""
        return self.search.max_probes

    def bounds(self) -> list[Load]:
        """The most streams it may ask for (the connection pool's size)."""
        if self.search.ceiling is not None:
            return [self.search.load(self.search.ceiling)]
        if self.search.mode == RATE:
            return [self.search.load(self.search.start)]  # no in-flight cap: unlimited pool
        return [self.search.load(self.search.start * 2 ** (self.search.max_probes - 1))]

    def next_level(self, index: int) -> Load | None:
        """The load of level ``index`` (the run asks again for the same index: the same
        answer), chosen from the probes measured so far."""
        while len(self._chosen) <= index:
            if len(self._chosen) > len(self.probes):
                return None  # asked beyond the next level before it was measured
            value = self._next_value()
            self._chosen.append(None if value is None else self.search.load(value))
            if value is None:
                break
        return self._chosen[index] if index < len(self._chosen) else None

    def measured(self, level: LevelResult) -> None:
        self._record(level)

    def _record(self, level: LevelResult) -> None:
        data = verdict_inputs(level)
        misses = judge(data, self.search.slos)
        goodput = data.get("goodput") or {}
        self.probes.append({
            "load": load_value(level.load), "passed": not misses, "failing": misses,
            "goodput_requests_per_s": goodput.get("requests_per_s"),
            "goodput_tokens_per_s": goodput.get("output_tokens_per_s"),
            # what each SLO read: a percentile SLO's value, a per-request SLO's pass rate
            "slo_values": {e["slo"]: e.get("value", e.get("pass_rate"))
                           for e in goodput.get("per_slo", [])},
            "steady": ((data.get("timeline") or {}).get("steady") or {}).get("steady"),
            "server": peaks(level.server)})

    def _bracket(self) -> tuple[float | None, float | None]:
        passing = [p["load"] for p in self.probes if p["passed"]]
        low = max(passing) if passing else None
        failing = [p["load"] for p in self.probes if not p["passed"]
                   and (low is None or p["load"] > low)]
        return low, (min(failing) if failing else None)

    def _next_value(self) -> float | None:
        search = self.search
        if not self.probes:
            return search.start
        low, high = self._bracket()
        integer = search.mode == CONCURRENCY
        if low is not None and high is not None and (
                (high - low) / low <= search.precision or (integer and high - low <= 1)):
            self.stopped = "within precision"
            return None
        if low is None and high is not None and integer and high <= 1:
            self.stopped = "fails at concurrency 1"
            return None
        if len(self.probes) >= search.max_probes:
            self.stopped = "max probes"
            return None
        if high is None:
            if search.ceiling is not None and low >= search.ceiling:
                self.stopped = "ceiling reached"
                return None
            return low * 2 if search.ceiling is None else min(low * 2, search.ceiling)
        if low is None:
            return high // 2 if integer else high / 2
        return (low + high) // 2 if integer else (low + high) / 2

    def describe(self) -> dict[str, Any]:
        low, high = self._bracket()
        return {"name": "slo-search", "mode": self.search.mode,
                "slos": [slo.text for slo in self.search.slos],
                "precision": self.search.precision, "max_probes": self.search.max_probes,
                "knee": low, "bracket": [low, high], "stopped": self.stopped,
                "probes": list(self.probes)}


def _load_text(mode: str, value: float | None) -> str:
    if value is None:
        return "none"
    return f"concurrency {value:g}" if mode == CONCURRENCY else f"rate {value:g}/s"


def format_knee(profile: dict[str, Any]) -> str:
    """The search for people: the knee, how it stopped, then one line per probe."""
    mode = profile["mode"]
    low, high = profile["bracket"]
    lines = [f"knee ({', '.join(profile['slos'])}): {_load_text(mode, profile['knee'])}"
             + (f"; next probe up, {_load_text(mode, high)}, failed" if high is not None else
                "; no probe failed: the knee is at least this")
             + f" (stopped: {profile['stopped'] or 'run ended'})"]
    for i, probe in enumerate(profile["probes"], 1):
        goodput = probe["goodput_requests_per_s"]
        verdict = "pass" if probe["passed"] else "FAIL " + "; ".join(probe["failing"])
        lines.append(f"  probe {i}: {_load_text(mode, probe['load'])}, goodput "
                     f"{'-' if goodput is None else f'{goodput:.2f}'} req/s: {verdict}")
    return "\n".join(lines)
