"""What the simulator counts: load, tokens, faults, a per-request log, Prometheus metrics.

One :class:`SimState` per running server (no globals), read by ``/sim/stats``,
``/sim/log`` and ``/metrics``. All timestamps are ``time.perf_counter_ns()``
(CLOCK_MONOTONIC on Linux), so a client in another process can compare them with its own.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .profile import SimProfile
from .scheduler import KvScheduler, Ticket

LOG_SIZE = 10_000
_LABELS = ("model_name", "engine")


class RequestLogEntry:
    """Timing of one request as the simulator saw it (``0`` = never happened)."""

    __slots__ = ("request_id", "received_ns", "first_content_write_ns", "last_write_ns",
                 "tokens", "status", "fault")

    def __init__(self, request_id: str, received_ns: int) -> None:
        self.request_id = request_id
        self.received_ns = received_ns
        self.first_content_write_ns = 0
        self.last_write_ns = 0
        self.tokens = 0
        self.status = 200
        self.fault: str | None = None

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


class PrefixCache:
    """Which prompt blocks the simulated server has seen (LRU, ``capacity`` blocks).

    A block is ``block_size`` tokens of about 4 characters; a block is identified by its
    text and everything before it, so only a shared *prefix* hits, as in vLLM.
    """

    def __init__(self, block_size: int, capacity: int) -> None:
        self.block_chars = block_size * 4
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def match(self, text: str, prompt_tokens: int) -> int:
        """Cached tokens of this prompt's leading blocks; then remember all its blocks."""
        digest = hashlib.blake2b(digest_size=16)
        hits, missed = 0, False
        for start in range(0, len(text) - self.block_chars + 1, self.block_chars):
            digest.update(text[start:start + self.block_chars].encode())
            key = digest.copy().digest()
            if not missed and key in self._blocks:
                hits += 1
                self._blocks.move_to_end(key)
                continue
            missed = True
            self._blocks[key] = None
            if len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)
        return min(hits * self.block_size, prompt_tokens)


class SimState:
    """Counters, the scheduler (running/waiting/KV), the request log and /metrics."""

    def __init__(self, profile: SimProfile, log_size: int = LOG_SIZE) -> None:
        self.profile = profile
        self.requests_received = 0
        self.requests_finished = 0
        self.scheduler = KvScheduler(profile)
        self.tokens_sent = 0
        self.bytes_sent = 0
        self.prompt_tokens = 0
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_hits = 0  # of which found there
        self.faults: Counter[str] = Counter()
        # GET /v1/models (a client's preflight) and GET /metrics, counted by path.
        self.reads: Counter[str] = Counter()
        self.prefix_cache = PrefixCache(profile.block_size, profile.num_gpu_blocks)
        self.log: deque[RequestLogEntry] = deque(maxlen=log_size)
        self._registry = CollectorRegistry(auto_describe=True)
        self._registry.register(_LiveCollector(self))
        labels = (profile.model, "0")
        self.ttft_histogram = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            _LABELS, registry=self._registry).labels(*labels)
        self.e2e_histogram = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            _LABELS, registry=self._registry).labels(*labels)
        self.itl_histogram = Histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            _LABELS, registry=self._registry).labels(*labels)
        self.tpot_histogram = Histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _LABELS, registry=self._registry).labels(*labels)
        self.queue_histogram = Histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase.",
            _LABELS, registry=self._registry).labels(*labels)

    def next_request_number(self) -> int:
        self.requests_received += 1
        return self.requests_received

    @property
    def running(self) -> int:
        return self.scheduler.running

    @property
    def waiting(self) -> int:
        return self.scheduler.waiting

    @property
    def kv_tokens(self) -> int:
        return self.scheduler.kv_tokens

    @asynccontextmanager
    async def slot(self, prompt_tokens: int, entry: RequestLogEntry) -> AsyncIterator[Ticket]:
        """Run as one of the scheduler's requests (:mod:`.scheduler`): wait for a slot and
        KV room for the prompt, hold them, leave. The caller grows the ticket with each
        generated token (:meth:`KvScheduler.grow`, which may preempt it)."""
        ticket = Ticket(prompt_tokens)
        queued_at = time.perf_counter()
        await self.scheduler.admit(ticket)
        self.queue_histogram.observe(time.perf_counter() - queued_at)
        self.prompt_tokens += prompt_tokens
        try:
            yield ticket
        finally:
            self.scheduler.leave(ticket)

    def finish(self, entry: RequestLogEntry) -> None:
        """Record a request that left the server (completed, failed or abandoned)."""
        self.requests_finished += 1
        if entry.fault:
            self.faults[entry.fault] += 1
        self.log.append(entry)

    def statistics(self) -> dict:
        """Served at ``GET /sim/stats``; ``cpu_s`` is this process's CPU time."""
        return {
            "requests_received": self.requests_received,
            "requests_finished": self.requests_finished,
            "active": self.running,
            "waiting": self.waiting,
            "tokens_sent": self.tokens_sent,
            "bytes_sent": self.bytes_sent,
            "faults_injected": dict(self.faults),
            "reads": dict(self.reads),
            "cpu_s": time.process_time(),
        }

    def log_entries(self) -> list[dict]:
        return [entry.to_dict() for entry in self.log]

    def metrics_text(self) -> bytes:
        return generate_latest(self._registry)


class _LiveCollector:
    """vLLM's gauges and counters, read from the state at scrape time."""

    def __init__(self, state: SimState) -> None:
        self._state = state

    def collect(self):
        state, profile = self._state, self._state.profile
        labels = [profile.model, "0"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(labels, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(labels, value)
            return family

        capacity = profile.num_gpu_blocks * profile.block_size
        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    state.running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    state.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                    min(state.kv_tokens / capacity, 1.0))
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                 labels=("block_size", "cache_dtype", "num_gpu_blocks",
                                         "engine", "model_name"))
        info.add_metric([str(profile.block_size), "auto", str(profile.num_gpu_blocks), "0",
                         profile.model], 1.0)
        yield info
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                      state.scheduler.preemptions)
        if profile.prefix_caching:
            yield counter("vllm:prefix_cache_queries",
                          "Prefix cache queries, in terms of number of queried tokens.",
                          state.prefix_queries)
            yield counter("vllm:prefix_cache_hits",
                          "Prefix cache hits, in terms of number of cached tokens.",
                          state.prefix_hits)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                      state.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      state.tokens_sent)
