"""The results file as typed, read-only objects: what :func:`loadgen.sweep` returns and what
:func:`load_results` reads back from a file.

    result = loadgen.load_results("results.json")
    result.levels[0].ttft_ms.p99          # a Stats; every metric of loadgen.metrics.ALL_METRICS
    result.levels[0].requests.errors      # {"http_500": 3}
    result.levels[0].histogram("itl_ms")  # the HdrHistogram, to merge or re-percentile

Each object keeps the exact dict it was built from, so :meth:`Results.to_dict` is the results
file byte for byte (field names: README, "Results file"); the typed fields are views of it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson
from hdrh.histogram import HdrHistogram

from .errors import ConfigError
from .metrics import ALL_METRICS, decode_histogram
from .record import RequestRecord


@dataclass(frozen=True)
class Stats:
    """Summary of one metric over a level, in the metric's unit (ms or tok/s); None when empty."""

    count: int
    min: float | None
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Stats:
        data = data or {}
        return cls(int(data.get("count") or 0), *(data.get(k) for k in
                                                  ("min", "mean", "p50", "p90", "p99", "max")))


@dataclass(frozen=True)
class Requests:
    completed: int
    failed: int
    incomplete: int
    dropped: int
    errors: dict[str, int]  # failures by type
    error_messages: dict[str, list[str]]  # the first distinct messages per type
    # Why some incomplete requests are (besides a stop): {"worker_died": n}.
    incomplete_reasons: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Requests:
        return cls(data.get("completed", 0), data.get("failed", 0), data.get("incomplete", 0),
                   data.get("dropped", 0), dict(data.get("errors") or {}),
                   {k: list(v) for k, v in (data.get("error_messages") or {}).items()},
                   dict(data.get("incomplete_reasons") or {}))


@dataclass(frozen=True)
class Level:
    """One measured load level. ``level.<metric>`` (e.g. ``level.ttft_ms``) is ``stats[metric]``."""

    load: dict[str, Any]
    requests: Requests
    duration_s: float
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    partial: bool
    stats: dict[str, Stats]  # every metric in the file, by name
    client: dict[str, Any]  # the client self-check (CPU, event-loop lag, warning)
    data: dict[str, Any] = field(repr=False, compare=False)  # the level as in the file
    # Raw request records, only from a run with keep_records=True (never in the file).
    records: list[RequestRecord] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any],
                  records: list[RequestRecord] | None = None) -> Level:
        names = [m for m in ALL_METRICS if m in data] + [
            m for m in data if m not in ALL_METRICS and _is_stats(data[m])]
        return cls(load=dict(data.get("load") or {}),
                   requests=Requests.from_dict(data.get("requests") or {}),
                   duration_s=data.get("duration_s", 0.0),
                   output_tokens=data.get("output_tokens", 0),
                   output_tokens_per_s=data.get("output_tokens_per_s", 0.0),
                   requests_per_s=data.get("requests_per_s", 0.0),
                   partial=bool(data.get("partial")),
                   stats={m: Stats.from_dict(data[m]) for m in names},
                   client=dict(data.get("client") or {}), data=data, records=records)

    def __getattr__(self, name: str) -> Stats:
        stats = self.__dict__.get("stats") or {}
        if name in stats:
            return stats[name]
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def histogram(self, metric: str) -> HdrHistogram:
        """The level's HdrHistogram of ``metric`` (units: ``data["histogram_units"]``)."""
        encoded = (self.data.get("histograms") or {}).get(metric)
        if encoded is None:
            raise KeyError(f"no {metric} histogram in this level")
        return decode_histogram(encoded)


def _is_stats(value: Any) -> bool:
    return isinstance(value, dict) and "count" in value and "p50" in value


@dataclass(frozen=True)
class Results:
    """A whole run: target, times, and its levels in the order they ran."""

    target: dict[str, Any]
    started_at: str | None
    finished_at: str | None
    partial: bool
    simulated: bool
    levels: tuple[Level, ...]
    data: dict[str, Any] = field(repr=False, compare=False)  # the results file as a dict
    # Where the run wrote its file (None: not written), and why not to the asked-for path.
    path: Path | None = field(default=None, compare=False)
    write_error: str | None = field(default=None, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any],
                  records: Sequence[list[RequestRecord] | None] = (),
                  path: Path | None = None, write_error: str | None = None) -> Results:
        levels = data.get("levels") or []
        per_level = list(records) + [None] * (len(levels) - len(records))
        return cls(target=dict(data.get("target") or {}), started_at=data.get("started_at"),
                   finished_at=data.get("finished_at"), partial=bool(data.get("partial")),
                   simulated=bool(data.get("simulated")),
                   levels=tuple(Level.from_dict(lv, recs) for lv, recs in zip(levels, per_level)),
                   data=data, path=path, write_error=write_error)

    def to_dict(self) -> dict[str, Any]:
        """The results file's content (a copy: these objects stay read-only)."""
        return copy.deepcopy(self.data)


def load_results(path: str | os.PathLike) -> Results:
    """Read a results file written by ``loadgen run/sweep`` (or :func:`loadgen.sweep`)."""
    path = Path(path)
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read results file {path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
        raise ConfigError(f"{path} is not a loadgen results file (no \"levels\" list)")
    return Results.from_dict(data, path=path)
