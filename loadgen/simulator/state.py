"""What the simulator counts: load, tokens, faults, a per-request log, Prometheus metrics.

One :class:`SimState` per running server (no globals), read by ``/sim/stats``,
``/sim/log`` and ``/metrics``. All timestamps are ``time.perf_counter_ns()``
(CLOCK_MONOTONIC on Linux), so a client in another process can compare them with its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .profile import SimProfile

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
    """Counters, the running/waiting slot pool, the request log and /metrics."""

    def __init__(self, profile: SimProfile, log_size: int = LOG_SIZE) -> None:
        self.profile = profile
        self.requests_received = 0
        self.requests_finished = 0
        self.running = 0
        self.waiting = 0
        self.tokens_sent = 0
        self.bytes_sent = 0
        self.prompt_tokens = 0
        self.kv_tokens = 0  # prompt + generated tokens of the running requests
        self.faults: Counter[str] = Counter()
        # GET /v1/models (a client's preflight) and GET /metrics, counted by path.
        self.reads: Counter[str] = Counter()
        self.prefix_cache = PrefixCache(profile.block_size, profile.num_gpu_blocks)
        self.log: deque[RequestLogEntry] = deque(maxlen=log_size)
        self._slots = asyncio.Semaphore(profile.max_num_seqs)
        self._registry = CollectorRegistry(auto_describe=True)
        self._registry.register(_LiveCollector(self))
        labels = (profile.model, "0")
        self.ttft_histogram = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            _LABELS, registry=self._registry).labels(*labels)
        self.e2e_histogram = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            _LABELS, registry=self._registry).labels(*labels)
        self.queue_histogram = Histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase.",
            _LABELS, registry=self._registry).labels(*labels)

    def next_request_number(self) -> int:
        self.requests_received += 1
        return self.requests_received

    @asynccontextmanager
    async def slot(self, prompt_tokens: int, entry: RequestLogEntry) -> AsyncIterator[None]:
        """Hold one of ``max_num_seqs`` running slots; wait in FIFO order for it.

        While held, the request's prompt and generated tokens (``entry.tokens``, which
        the caller also adds to ``kv_tokens``) count as KV-cache in use.
        """
        self.waiting += 1
        queued_at = time.perf_counter()
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.queue_histogram.observe(time.perf_counter() - queued_at)
        self.running += 1
        self.prompt_tokens += prompt_tokens
        self.kv_tokens += prompt_tokens
        tokens_before = entry.tokens
        try:
            yield
        finally:
            self.running -= 1
            self.kv_tokens -= prompt_tokens + entry.tokens - tokens_before
            self._slots.release()

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
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                      state.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      state.tokens_sent)
