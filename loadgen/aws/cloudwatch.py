"""A SageMaker endpoint's own CloudWatch metrics over one load level (GetMetricData).

Two namespaces, both with the dimensions ``EndpointName`` and ``VariantName``:

=====================  ======================  =============  ===============================
metric                 namespace               unit (AWS)     in the results
=====================  ======================  =============  ===============================
ModelLatency           AWS/SageMaker           microseconds   ms: per-period mean, level mean
OverheadLatency        AWS/SageMaker           microseconds   and p50 (see below), max
ModelSetupTime         AWS/SageMaker           microseconds   (serverless endpoints only)
Invocations            AWS/SageMaker           count          per-period sum, level total
Invocation4XXErrors    AWS/SageMaker           count          per-period sum, level total
Invocation5XXErrors    AWS/SageMaker           count          per-period sum, level total
GPUUtilization         /aws/sagemaker/Endp..   % × GPUs       per-period mean, level mean, max
GPUMemoryUtilization   /aws/sagemaker/Endp..   % × GPUs       per-period mean, level mean, max
CPUUtilization         /aws/sagemaker/Endp..   % × cores      per-period mean, level mean, max
MemoryUtilization      /aws/sagemaker/Endp..   %              per-period mean, level mean, max
=====================  ======================  =============  ===============================

Each metric is read per ``period_s`` (10 s) over the level's window plus one period either
side. A data point's timestamp is its period's start; the **level's periods** are those that
overlap the level (``t + period > start`` and ``t < end``); level statistics use only those.
A latency's level mean is exact: Σ Sum / Σ SampleCount over the level's periods. Its level
p50 is the median of the per-period p50s weighted by each period's sample count (CloudWatch
cannot merge percentiles across periods; for a steady level they agree closely); percentiles
are asked in a separate call once polling is over, so an endpoint (or emulator) that refuses
them costs only the percentiles.

Pure functions (:func:`metric_queries`, :func:`parse_results`, :func:`level_section`) are
separate from the one boto3 call (:func:`get_metric_data`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from .errors import aws_call

INVOCATIONS_NS = "AWS/SageMaker"
INSTANCE_NS = "/aws/sagemaker/Endpoints"
LATENCY, COUNT, UTILIZATION = "latency", "count", "utilization"
# The statistics asked per kind; percentiles go in their own call (module docstring).
_STATS = {LATENCY: ("Sum", "SampleCount", "Maximum"), COUNT: ("Sum",),
          UTILIZATION: ("Average", "Maximum")}
PERCENTILE_STATS = ("p50",)


@dataclass(frozen=True)
class Metric:
    name: str
    namespace: str
    kind: str  # LATENCY (µs, reported in ms), COUNT, UTILIZATION (%)


METRICS = (
    Metric("ModelLatency", INVOCATIONS_NS, LATENCY),
    Metric("OverheadLatency", INVOCATIONS_NS, LATENCY),
    Metric("ModelSetupTime", INVOCATIONS_NS, LATENCY),
    Metric("Invocations", INVOCATIONS_NS, COUNT),
    Metric("Invocation4XXErrors", INVOCATIONS_NS, COUNT),
    Metric("Invocation5XXErrors", INVOCATIONS_NS, COUNT),
    Metric("GPUUtilization", INSTANCE_NS, UTILIZATION),
    Metric("GPUMemoryUtilization", INSTANCE_NS, UTILIZATION),
    Metric("CPUUtilization", INSTANCE_NS, UTILIZATION),
    Metric("MemoryUtilization", INSTANCE_NS, UTILIZATION),
)


@dataclass(frozen=True)
class Window:
    """A level on the wall clock (epoch seconds) and the period its metrics are read at."""

    endpoint: str
    variant: str
    start_s: float  # the level's measured window
    end_s: float
    period_s: int = 10

    def fetch_range(self) -> tuple[float, float]:
        """The level plus one period either side, on period boundaries."""
        p = self.period_s
        return math.floor(self.start_s / p) * p - p, math.ceil(self.end_s / p) * p + p

    def in_level(self, t: float) -> bool:
        return t + self.period_s > self.start_s and t < self.end_s


def _query_id(index: int, stat: str) -> str:
    return f"m{index}_{stat.lower().replace('.', '_')}"


def metric_queries(window: Window, stats_of=lambda m: _STATS[m.kind]) -> list[dict[str, Any]]:
    """GetMetricData's MetricDataQueries: every metric, each statistic ``stats_of`` names."""
    dims = [{"Name": "EndpointName", "Value": window.endpoint},
            {"Name": "VariantName", "Value": window.variant}]
    return [{"Id": _query_id(i, stat), "ReturnData": True,
             "MetricStat": {"Metric": {"Namespace": m.namespace, "MetricName": m.name,
                                       "Dimensions": dims},
                            "Period": window.period_s, "Stat": stat}}
            for i, m in enumerate(METRICS) for stat in stats_of(m)]


def percentile_queries(window: Window) -> list[dict[str, Any]]:
    return metric_queries(window, lambda m: PERCENTILE_STATS if m.kind == LATENCY else ())


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    return float(value)


Points = dict[str, dict[float, float]]  # query id -> {period start (epoch s): value}


def parse_results(results: Iterable[dict[str, Any]]) -> Points:
    """MetricDataResults (every page) -> {query id: {period start: value}}."""
    points: Points = {}
    for result in results:
        series = points.setdefault(result["Id"], {})
        for stamp, value in zip(result.get("Timestamps", []), result.get("Values", [])):
            series[_epoch(stamp)] = float(value)
    return points


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _weighted_median(pairs: list[tuple[float, float]]) -> float | None:
    """The median of ``(value, weight)`` pairs: the value where the cumulative weight
    reaches half the total."""
    pairs = sorted((v, w) for v, w in pairs if w > 0)
    total = sum(w for _, w in pairs)
    running = 0.0
    for value, weight in pairs:
        running += weight
        if running >= total / 2:
            return value
    return None


def _metric_section(index: int, metric: Metric, points: Points, window: Window) -> dict[str, Any]:
    """One metric's series (every fetched period) and its level statistics."""
    def get(stat: str) -> dict[float, float]:
        return points.get(_query_id(index, stat), {})

    if metric.kind == LATENCY:
        sums, counts, maxima, p50s = get("Sum"), get("SampleCount"), get("Maximum"), get("p50")
        stamps = sorted(t for t in sums if counts.get(t))
        values = [sums[t] / counts[t] / 1000 for t in stamps]  # µs -> ms
        level = [t for t in stamps if window.in_level(t)]
        n = sum(counts[t] for t in level)
        level_max = max((maxima[t] for t in level if t in maxima), default=None)
        summary = {"mean_ms": _r(sum(sums[t] for t in level) / n / 1000) if n else None,
                   "p50_ms": _r(_weighted_median([(p50s[t] / 1000, counts[t])
                                                  for t in level if t in p50s])),
                   "max_ms": _r(level_max / 1000) if level_max is not None else None,
                   "samples": int(n)}
        unit, extra = "ms", {"samples": [int(counts[t]) for t in stamps]}
    elif metric.kind == COUNT:
        sums = get("Sum")
        stamps = sorted(sums)
        values = [sums[t] for t in stamps]
        level = [t for t in stamps if window.in_level(t)]
        summary = {"sum": _r(sum(sums[t] for t in level)) if level else None}
        unit, extra = "count", {}
    else:
        averages, maxima = get("Average"), get("Maximum")
        stamps = sorted(averages)
        values = [averages[t] for t in stamps]
        level = [t for t in stamps if window.in_level(t)]
        summary = {"mean": _r(sum(averages[t] for t in level) / len(level)) if level else None,
                   "max": _r(max((maxima[t] for t in level if t in maxima), default=None))}
        unit, extra = "percent", {}
    return {"namespace": metric.namespace, "unit": unit,
            "t_s": [_r(t - window.start_s) for t in stamps], "values": [_r(v) for v in values],
            **extra, "level": summary, "level_points": len(level)}


def level_section(points: Points, window: Window) -> dict[str, Any]:
    """The level's ``cloudwatch`` metrics: one entry per metric, and which came back empty
    (no data point in the level's periods)."""
    metrics = {m.name: _metric_section(i, m, points, window) for i, m in enumerate(METRICS)}
    empty = [name for name, section in metrics.items() if not section["level_points"]]
    return {"metrics": metrics, "empty": empty}


def get_metric_data(cloudwatch: Any, queries: list[dict[str, Any]],
                    start_s: float, end_s: float) -> Points:
    """GetMetricData over ``[start_s, end_s)`` (every page), parsed."""
    results: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "MetricDataQueries": queries, "ScanBy": "TimestampAscending",
        "StartTime": datetime.fromtimestamp(start_s, timezone.utc),
        "EndTime": datetime.fromtimestamp(end_s, timezone.utc)}
    with aws_call("read CloudWatch metrics (GetMetricData)"):
        for _ in range(100):  # pages: bounded (a level's window is a few hundred points)
            page = cloudwatch.get_metric_data(**kwargs)
            results.extend(page.get("MetricDataResults", []))
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
    return parse_results(results)
