"""What a running vLLM server says about itself, read from its Prometheus ``/metrics``.

- :func:`parse_metrics`, :func:`facts_from_metrics`, :func:`load_gauges`: pure functions
  over the exposition text. ``vllm:cache_config_info`` gives the KV tokens
  (``kv_cache_size_tokens`` on new versions, else ``num_gpu_blocks`` x ``block_size``);
  the gauges are what the sampler records.
- :func:`fetch_server_facts`: KV-cache capacity (and max concurrency on new
  versions) for the results file's ``server`` key.
- :class:`ServerMetricsSampler`: during a run, scrapes ``/metrics`` every ``interval_s``
  seconds alongside the load, reading it in our names (:mod:`.metric_names`, one table
  for every vLLM version): running/waiting requests and KV-cache usage as read;
  preemptions, prompt and generation tokens as rates per second; the prefix-cache hit
  rate (hits / queries); and, over the level, the request histograms vLLM keeps
  (server-side TTFT, TPOT, ITL, e2e, queue time). Memory stays bounded: when
  ``max_samples`` is reached, every other sample is dropped and the sampling stride
  doubles (summaries still see every scrape).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from ..errors import LoadgenError, TargetError, one_line
from .facts import ServerFacts
from .metric_names import read_scrape

# The sampled series (samples columns): gauges as read, counters as rates per second.
SERIES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
          "preemptions_per_s", "generation_tokens_per_s", "prompt_tokens_per_s",
          "prefix_cache_hit_rate")
# Request-level histograms whose level totals are kept (server-side TTFT, TPOT, ...).
HISTOGRAMS = ("ttft", "tpot", "itl", "e2e", "queue_time")

# ---------------------------------------------------------------------------
# Prometheus text -> facts and gauges (pure: no I/O)


def parse_metrics(text: str) -> dict[str, list]:
    """Prometheus text -> {family name: [Sample, ...]} (counter families lose ``_total``)."""
    try:
        return {family.name: list(family.samples) for family in text_string_to_metric_families(text)}
    except (ValueError, TypeError, IndexError) as err:
        raise TargetError("/metrics did not return Prometheus text; is this a vLLM server?") from err


def _label_int(labels: dict[str, str], name: str) -> int | None:
    try:
        return int(float(labels[name]))
    except (KeyError, ValueError):  # absent, or "None" before the KV cache exists
        return None


def _label_float(labels: dict[str, str], name: str) -> float | None:
    try:
        return float(labels[name])
    except (KeyError, ValueError):
        return None


def facts_from_metrics(metrics: dict[str, list]) -> ServerFacts:
    """KV-cache facts from parsed ``/metrics`` (see :func:`parse_metrics`).

    One ``cache_config_info`` sample per engine (data parallel): capacities add up.
    """
    tokens_total = 0
    concurrency_total = 0.0
    have_tokens = have_concurrency = False
    for sample in metrics.get("vllm:cache_config_info", []):
        tokens = _label_int(sample.labels, "kv_cache_size_tokens")
        if tokens is None:
            blocks = _label_int(sample.labels, "num_gpu_blocks")
            block_size = _label_int(sample.labels, "block_size")
            tokens = blocks * block_size if blocks and block_size else None
        if tokens is not None:
            tokens_total += tokens
            have_tokens = True
        concurrency = _label_float(sample.labels, "kv_cache_max_concurrency")
        if concurrency is not None:
            concurrency_total += concurrency
            have_concurrency = True
    return ServerFacts(
        kv_cache_tokens=tokens_total if have_tokens else None,
        max_concurrency=round(concurrency_total, 2) if have_concurrency else None,
    )


# The live gauges sampled during a run, and the older name of the KV-usage gauge
# (vllm:gpu_cache_usage_perc, deprecated in 0.9.2 and hidden from 0.11).
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTIONS = "vllm:num_preemptions"


def _total(metrics: dict[str, list], name: str) -> float | None:
    samples = metrics.get(name)
    if not samples:
        return None
    # Counter families also carry ``_created`` samples; keep only the value series.
    return sum(s.value for s in samples if not s.name.endswith("_created"))


def load_gauges(metrics: dict[str, list]) -> dict[str, float | str | None]:
    """Running/waiting requests (summed over engines), mean KV-cache usage (0-1), preemptions."""
    kv_usage = None
    kv_name = None
    for name in KV_USAGE_NAMES:
        samples = metrics.get(name)
        if samples:
            kv_usage = sum(s.value for s in samples) / len(samples)
            kv_name = name
            break
    return {
        "num_requests_running": _total(metrics, RUNNING),
        "num_requests_waiting": _total(metrics, WAITING),
        "kv_cache_usage_perc": kv_usage,
        "kv_cache_metric": kv_name,
        "num_preemptions": _total(metrics, PREEMPTIONS),
    }


def is_vllm_metrics(metrics: dict[str, list]) -> bool:
    return any(name.startswith("vllm:") for name in metrics)



# ---------------------------------------------------------------------------
# Reading a server


def metrics_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/v1`` (an OpenAI base URL) or ``.../metrics`` -> the /metrics URL."""
    parsed = URL(url)
    if not parsed.is_absolute() or parsed.scheme not in ("http", "https"):
        raise TargetError(f"--url {url!r} is not an http(s) URL; pass e.g. http://127.0.0.1:8000")
    path = parsed.path.rstrip("/")
    if path.endswith("/metrics"):
        return str(parsed.with_path(path).with_query(None))
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return str(parsed.with_path(path + "/metrics").with_query(None))


async def _get_metrics(session: aiohttp.ClientSession, url: str) -> dict[str, list]:
    async with session.get(url) as response:
        if response.status != 200:
            raise TargetError(f"GET {url} returned HTTP {response.status}; is this a vLLM server with metrics enabled?")
        text = await response.text()
    metrics = parse_metrics(text)
    if not is_vllm_metrics(metrics):
        raise TargetError(f"{url} has no vllm:* metrics; is this a vLLM server?")
    return metrics


async def fetch_server_facts(url: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """The facts dict (``loadgen.vllm.facts.FACT_KEYS``) a running server's /metrics holds.

    Only the KV-cache facts are there; load times and weight memory are in the
    startup log only (``loadgen facts --log``). Raises TargetError with one line.
    """
    target = metrics_url(url)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            metrics = await _get_metrics(session, target)
    except (aiohttp.ClientError, asyncio.TimeoutError) as err:
        raise TargetError(f"cannot read {target}: {type(err).__name__} {err}".strip()) from None
    return facts_from_metrics(metrics).to_dict()


class _Series:
    """Running max/mean of one series over every scrape (not just the kept samples)."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.max: float | None = None

    def add(self, value: float | None) -> None:
        if value is None:
            return
        self.count += 1
        self.total += value
        self.max = value if self.max is None else max(self.max, value)

    def summary(self) -> dict[str, float | None]:
        mean = self.total / self.count if self.count else None
        return {"max": self.max, "mean": round(mean, 4) if mean is not None else None}


def _rate(now: dict, before: dict | None, name: str, seconds: float) -> float | None:
    """A counter's increase per second between two scrapes (None: absent, or reset)."""
    if before is None or seconds <= 0 or name not in now or name not in before:
        return None
    increase = now[name] - before[name]
    return round(increase / seconds, 3) if increase >= 0 else None


def _hit_rate(now: dict, before: dict | None) -> float | None:
    """Prefix-cache hits / queries between two scrapes (None: no queries)."""
    if before is None:
        return None
    try:
        queries = now["prefix_cache_queries"] - before["prefix_cache_queries"]
        hits = now["prefix_cache_hits"] - before["prefix_cache_hits"]
    except KeyError:
        return None
    return round(hits / queries, 4) if queries > 0 and hits >= 0 else None


def series_of(values: dict, before: dict | None, seconds: float) -> dict[str, float | None]:
    """One row of the sampled series: gauges as read, counters as rates since ``before``."""
    return {
        "num_requests_running": values.get("requests_running"),
        "num_requests_waiting": values.get("requests_waiting"),
        "kv_cache_usage_perc": values.get("kv_cache_usage"),
        "preemptions_per_s": _rate(values, before, "preemptions", seconds),
        "generation_tokens_per_s": _rate(values, before, "generation_tokens", seconds),
        "prompt_tokens_per_s": _rate(values, before, "prompt_tokens", seconds),
        "prefix_cache_hit_rate": _hit_rate(values, before),
    }


class ServerMetricsSampler:
    """Scrape a vLLM server's /metrics every ``interval_s`` until cancelled.

    ``await sampler.run()`` in a task next to the load; cancel it when the level ends,
    ``await sampler.finish()`` (one last scrape, so the level's totals reach its end), then
    ``sampler.snapshot()``. Scrape errors are counted, never raised.
    """

    def __init__(
        self, url: str, interval_s: float = 1.0, *, max_samples: int = 1024, timeout_s: float | None = None
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.url = metrics_url(url)
        self.interval_s = interval_s
        self.max_samples = max(2, max_samples)
        self.timeout_s = timeout_s if timeout_s is not None else max(2.0, 2 * interval_s)
        self.start_ns: int | None = None
        self.scrapes = 0
        self.errors: dict[str, int] = {}
        self.last_error: str | None = None
        self.families: dict[str, str] = {}  # our name -> the vLLM family that carried it
        self.raw: dict[str, float] = {}  # unknown vllm:* families, last scrape
        self._stride = 1  # keep every stride-th scrape as a sample
        self._samples: dict[str, list] = {"t_s": [], **{name: [] for name in SERIES}}
        self._series = {name: _Series() for name in SERIES}
        self._first: tuple[float, dict] | None = None  # (t_s, values) of the first scrape
        self._last: tuple[float, dict] | None = None

    async def run(self) -> None:
        self.start_ns = time.perf_counter_ns()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            tick = 0
            while True:
                await self._scrape(session)
                # Keep a fixed schedule; a slow scrape skips ticks rather than drifting.
                elapsed = (time.perf_counter_ns() - self.start_ns) / 1e9
                tick = max(tick + 1, int(elapsed / self.interval_s) + 1)
                await asyncio.sleep(max(0.0, tick * self.interval_s - elapsed))

    async def finish(self) -> None:
        """One last scrape at the level's end (the periodic one may be up to a tick old)."""
        if self.start_ns is None:
            return
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await self._scrape(session)

    async def _scrape(self, session: aiohttp.ClientSession) -> None:
        assert self.start_ns is not None
        t_s = (time.perf_counter_ns() - self.start_ns) / 1e9
        try:
            metrics = await _get_metrics(session, self.url)
        except (aiohttp.ClientError, asyncio.TimeoutError, LoadgenError) as err:
            name = type(err).__name__
            self.errors[name] = self.errors.get(name, 0) + 1
            self.last_error = one_line(f"{name}: {err}", 200)
            return
        self._record(round(t_s, 3), read_scrape(metrics))

    def _record(self, t_s: float, reading: dict[str, Any]) -> None:
        values = reading["values"]
        self.families.update(reading["families"])
        self.raw = reading["raw"]
        before = self._last
        row = series_of(values, before[1] if before else None,
                        t_s - before[0] if before else 0.0)
        self._last = (t_s, values)
        if self._first is None:
            self._first = self._last
        for name in SERIES:
            self._series[name].add(row[name])
        if self.scrapes % self._stride == 0:
            self._samples["t_s"].append(t_s)
            for name in SERIES:
                self._samples[name].append(row[name])
            if len(self._samples["t_s"]) >= self.max_samples:
                self._downsample()
        self.scrapes += 1

    def _downsample(self) -> None:
        for values in self._samples.values():
            del values[1::2]
        self._stride *= 2

    def totals(self) -> dict[str, Any]:
        """Counter increases and request histograms from the first to the last scrape."""
        if self._first is None or self._last is None:
            return {}
        (t0, first), (t1, last) = self._first, self._last
        out: dict[str, Any] = {"seconds": round(t1 - t0, 3)}
        for name in ("preemptions", "prompt_tokens", "generation_tokens"):
            if name in first and name in last and last[name] >= first[name]:
                out[name] = last[name] - first[name]
        for name in ("prompt_tokens", "generation_tokens"):
            if name in out and t1 > t0:
                out[f"{name}_per_s"] = round(out[name] / (t1 - t0), 3)
        out["prefix_cache_hit_rate"] = _hit_rate(last, first)
        out["histograms"] = {name: last[name].minus(first.get(name)).summary_ms()
                             for name in HISTOGRAMS if name in last}
        return out

    def snapshot(self) -> dict[str, Any]:
        """JSON-able: the kept samples (columns), per-series max/mean over all scrapes,
        the level's totals, which vLLM names were read, errors."""
        totals = self.totals()
        return {
            "url": self.url,
            "interval_s": self.interval_s,
            "start_ns": self.start_ns,
            "scrapes": self.scrapes,
            "sample_every": self._stride,
            "errors": dict(self.errors),
            "last_error": self.last_error,
            "kv_cache_metric": self.families.get("kv_cache_usage"),
            "families": dict(self.families),
            "samples": {name: list(values) for name, values in self._samples.items()},
            "summary": {name: series.summary() for name, series in self._series.items()},
            "preemptions": totals.get("preemptions"),
            "totals": totals,
            "raw": dict(self.raw),
        }
