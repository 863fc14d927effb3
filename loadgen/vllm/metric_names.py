"""vLLM's Prometheus metric names across versions, mapped to one name each, and one scrape
read into those names (pure: no I/O).

:data:`METRIC_NAMES` is the one table. Each row: our name, the kind, the vLLM family
names that carry it (newest first; counters without ``_total``, as
``prometheus_client``'s parser names the family) and where each was seen. Anything else
starting with ``vllm:`` is kept raw (:func:`read_scrape`'s ``raw``), never dropped.

=====================  =========  ===========================================  =================
our name               kind       vLLM families (newest first)                 seen in
=====================  =========  ===========================================  =================
requests_running       gauge      vllm:num_requests_running                    0.8.5 – 0.33
requests_waiting       gauge      vllm:num_requests_waiting                    0.8.5 – 0.33
kv_cache_usage         gauge 0–1  vllm:kv_cache_usage_perc                     0.9.2 – 0.33
                                  vllm:gpu_cache_usage_perc                    ≤ 0.10 (hidden 0.11)
preemptions            counter    vllm:num_preemptions                         0.8.5 – 0.33
prompt_tokens          counter    vllm:prompt_tokens                           0.8.5 – 0.33
generation_tokens      counter    vllm:generation_tokens                       0.8.5 – 0.33
prefix_cache_queries   counter    vllm:prefix_cache_queries                    0.10 – 0.33
                                  vllm:gpu_prefix_cache_queries                0.8.5 – 0.9
prefix_cache_hits      counter    vllm:prefix_cache_hits                       0.10 – 0.33
                                  vllm:gpu_prefix_cache_hits                   0.8.5 – 0.9
ttft                   histogram  vllm:time_to_first_token_seconds             0.8.5 – 0.33
itl                    histogram  vllm:inter_token_latency_seconds             0.11 – 0.33
                                  vllm:time_per_output_token_seconds           ≤ 0.10
tpot                   histogram  vllm:request_time_per_output_token_seconds   0.10.2 – 0.33
e2e                    histogram  vllm:e2e_request_latency_seconds             0.8.5 – 0.33
queue_time             histogram  vllm:request_queue_time_seconds              0.8.5 – 0.33
=====================  =========  ===========================================  =================

Sources: ``shared/reference/vllm-facts.md`` and the recorded texts in
``tests/fixtures/vllm_metrics`` (0.8.5, 0.27.1 and a real 0.32.0 CPU server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"


@dataclass(frozen=True)
class MetricName:
    name: str  # ours
    kind: str
    families: tuple[str, ...]  # vLLM's, newest first


METRIC_NAMES: tuple[MetricName, ...] = (
    MetricName("requests_running", GAUGE, ("vllm:num_requests_running",)),
    MetricName("requests_waiting", GAUGE, ("vllm:num_requests_waiting",)),
    MetricName("kv_cache_usage", GAUGE, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    MetricName("preemptions", COUNTER, ("vllm:num_preemptions",)),
    MetricName("prompt_tokens", COUNTER, ("vllm:prompt_tokens",)),
    MetricName("generation_tokens", COUNTER, ("vllm:generation_tokens",)),
    MetricName("prefix_cache_queries", COUNTER,
               ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")),
    MetricName("prefix_cache_hits", COUNTER,
               ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")),
    MetricName("ttft", HISTOGRAM, ("vllm:time_to_first_token_seconds",)),
    MetricName("itl", HISTOGRAM, ("vllm:inter_token_latency_seconds",
                                  "vllm:time_per_output_token_seconds")),
    MetricName("tpot", HISTOGRAM, ("vllm:request_time_per_output_token_seconds",)),
    MetricName("e2e", HISTOGRAM, ("vllm:e2e_request_latency_seconds",)),
    MetricName("queue_time", HISTOGRAM, ("vllm:request_queue_time_seconds",)),
)
KNOWN_FAMILIES = frozenset(f for row in METRIC_NAMES for f in row.families) | {
    "vllm:cache_config_info"}
RAW_KEPT = 64  # unknown vllm:* families kept per scrape, at most


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over engines: cumulative ``buckets`` (upper bound, count)."""

    buckets: tuple[tuple[float, float], ...]
    total: float  # _sum, seconds
    count: float

    def minus(self, earlier: "Histogram | None") -> "Histogram":
        """What was observed between ``earlier`` and this scrape (counters only grow;
        a server restart in between makes the difference meaningless: use this one)."""
        if earlier is None or earlier.count > self.count:
            return self
        before = dict(earlier.buckets)
        return Histogram(tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
                         self.total - earlier.total, self.count - earlier.count)

    def quantile_bound(self, q: float) -> float | None:
        """The upper bound of the bucket the ``q`` quantile falls in: the quantile is at
        most this (vLLM's buckets are coarse; interpolating inside one, as Prometheus's
        ``histogram_quantile`` does, can put a 0.02 ms median at 150 ms). None: empty, or
        beyond the last finite bound."""
        if self.count <= 0:
            return None
        rank = q * self.count
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                return None if le == float("inf") else le
        return None

    def summary_ms(self) -> dict[str, float | None]:
        """``{count, mean_ms, p50_le_ms, p99_le_ms}``: the exact mean (sum / count) and the
        bucket bounds the median and p99 lie under."""
        def ms(seconds: float | None) -> float | None:
            return None if seconds is None else round(seconds * 1000, 3)
        return {"count": int(self.count),
                "mean_ms": ms(self.total / self.count) if self.count > 0 else None,
                "p50_le_ms": ms(self.quantile_bound(0.5)),
                "p99_le_ms": ms(self.quantile_bound(0.99))}


def _values(samples: list) -> list:
    # Counter families also carry ``_created`` samples: keep only the value series.
    return [s for s in samples if not s.name.endswith("_created")]


def _histogram(samples: list) -> Histogram | None:
    buckets: dict[float, float] = {}
    total = count = 0.0
    for s in samples:
        if s.name.endswith("_bucket"):
            le = float(s.labels.get("le", "inf"))
            buckets[le] = buckets.get(le, 0.0) + s.value
        elif s.name.endswith("_sum"):
            total += s.value
        elif s.name.endswith("_count"):
            count += s.value
    if not buckets and not count:
        return None
    return Histogram(tuple(sorted(buckets.items())), total, count)


def read_scrape(metrics: dict[str, list]) -> dict[str, Any]:
    """One parsed scrape (``{family: [Sample]}``) in our names.

    ``{our name: value}`` for gauges (running/waiting summed over engines, KV usage their
    mean) and counters (summed); :class:`Histogram` for histograms; absent names are left
    out. ``families``: which vLLM family gave each name; ``raw``: unknown ``vllm:*``
    gauge/counter families, summed, by their own name.
    """
    out: dict[str, Any] = {}
    families: dict[str, str] = {}
    for row in METRIC_NAMES:
        for family in row.families:
            samples = metrics.get(family)
            if not samples:
                continue
            if row.kind == HISTOGRAM:
                value: Any = _histogram(samples)
            else:
                kept = _values(samples)
                value = sum(s.value for s in kept)
                if row.name == "kv_cache_usage" and kept:
                    value /= len(kept)  # a fraction per engine: their mean
            if value is not None:
                out[row.name], families[row.name] = value, family
                break
    raw = {}
    for family, samples in metrics.items():
        if family.startswith("vllm:") and family not in KNOWN_FAMILIES and len(raw) < RAW_KEPT:
            kept = [s for s in _values(samples) if not s.name.endswith(("_bucket", "_sum",
                                                                      "_count"))]
            if kept and not family.endswith("_created"):
                raw[family] = sum(s.value for s in kept)
    return {"values": out, "families": families, "raw": raw}
