"""How the simulated server behaves: timing, batching, faults (one frozen dataclass).

Timing model (seconds). ``n`` is the number of requests running (holding one of
``max_num_seqs`` slots) at the moment a token is scheduled; ``J`` is a fresh jitter
factor ``1 + jitter * U(-1, 1)`` drawn from the request's seeded RNG.

* **Queue.** A request waits, first come first served, until one of ``max_num_seqs``
  slots is free (vLLM's scheduler limit; shown as ``vllm:num_requests_waiting``).
* **TTFT** (from getting a slot to the first token)::

      (ttft_s + prefill_s_per_1k_tokens * prompt_tokens / 1000) * J

* **ITL** (between two consecutive tokens, recomputed for every token)::

      itl_s * (1 + batch_slowdown * (n - 1)) * J

  Every extra sequence in the batch makes each decode step ``batch_slowdown`` longer,
  as a memory-bound GPU does. Aggregate decode throughput at concurrency ``c`` is::

      c / (itl_s * (1 + batch_slowdown * (c - 1)))   tokens/s, for c <= max_num_seqs

  It rises with ``c`` towards ``1 / (itl_s * batch_slowdown)`` and stays flat beyond
  ``max_num_seqs``, where extra load only queues (latency keeps rising): the saturation
  curve of a real server.

Token ``i`` of a request is due at ``first_token_time + sum of the ITLs before it``: an
absolute schedule, so a late wake-up never shifts later tokens. Tokens already due are
written together (up to ``events_per_write`` SSE events per socket write). With
``itl_s == 0`` (fast mode) every token is due at once and the stream goes out as fast
as the socket takes it.

Connections: ``close_after_response`` closes the socket after each streamed response with
no ``Connection: close`` header (as llama.cpp's server does); ``connection_close`` sends
``Connection: close`` and closes; ``keepalive_timeout_s`` closes idle connections.

Faults: each request draws once from its seeded RNG; ``fault_500``, ``fault_429``,
``fault_disconnect`` and ``fault_stall`` are the fractions of requests that get an
HTTP 500, an HTTP 429, a connection closed mid-stream, or a ``stall_s`` pause mid-stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from ..errors import ConfigError


@dataclass(frozen=True)
class SimProfile:
    model: str = "loadgen-sim"
    ttft_s: float = 0.05
    itl_s: float = 0.01
    jitter: float = 0.0  # fraction, < 1: each delay is scaled by 1 + jitter * U(-1, 1)
    batch_slowdown: float = 0.05  # ITL grows by this fraction per extra running request
    max_num_seqs: int = 32  # running slots; more requests wait in a queue
    prefill_s_per_1k_tokens: float = 0.0  # extra TTFT per 1000 prompt tokens
    max_model_len: int = 32768  # prompt + max_tokens above this is a 400, like vLLM
    # Mean answer length when ignore_eos is off and no responder gives the text:
    # the answer ends at a seeded point in [natural_tokens/2, 3*natural_tokens/2].
    natural_tokens: int = 256
    events_per_write: int = 64  # most SSE events written in one socket write
    # KV cache shown in /metrics (vllm:cache_config_info, vllm:kv_cache_usage_perc).
    block_size: int = 16
    num_gpu_blocks: int = 8192
    fault_500: float = 0.0
    fault_429: float = 0.0
    fault_disconnect: float = 0.0
    fault_stall: float = 0.0
    stall_s: float = 2.0
    seed: int = 0
    # Connections, as real servers treat them (none of these is vLLM's own behaviour):
    # close the socket after each streamed response without saying so (llama.cpp's server),
    close_after_response: bool = False
    # answer every generation request with ``Connection: close`` and close after it,
    connection_close: bool = False
    # close keep-alive connections idle for this long (aiohttp's default 75 s; uvicorn 5 s).
    keepalive_timeout_s: float = 75.0
    # vLLM --enable-prefix-caching with --enable-prompt-tokens-details: prompts sharing
    # leading blocks (block_size tokens of ~4 characters) report them in
    # usage.prompt_tokens_details.cached_tokens, and only uncached tokens pay prefill.
    prefix_caching: bool = False
    # vLLM --max-logprobs (default 20): a request asking for more alternatives per token
    # gets a 400; 0 plays a server that refuses logprobs.
    max_logprobs: int = 20

    def __post_init__(self) -> None:
        problem = _first_problem(self)
        if problem:
            raise ConfigError(f"invalid simulator profile: {problem}")

    def itl_at(self, running: int) -> float:
        """Mean inter-token latency when ``running`` requests share the batch."""
        return self.itl_s * (1.0 + self.batch_slowdown * (max(running, 1) - 1))

    def ttft_for(self, prompt_tokens: int) -> float:
        """Mean time from getting a slot to the first token."""
        return self.ttft_s + self.prefill_s_per_1k_tokens * prompt_tokens / 1000.0

    def throughput_at(self, concurrency: int) -> float:
        """Steady-state decode tokens/s the model predicts at a given concurrency."""
        if self.itl_s == 0:
            return math.inf
        running = min(concurrency, self.max_num_seqs)
        return running / self.itl_at(running)

    @property
    def fault_fraction(self) -> float:
        return self.fault_500 + self.fault_429 + self.fault_disconnect + self.fault_stall

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> SimProfile:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown simulator profile field(s): {', '.join(unknown)}")
        return cls(**data)


def _first_problem(p: SimProfile) -> str | None:
    non_negative = ("ttft_s", "itl_s", "batch_slowdown", "prefill_s_per_1k_tokens", "stall_s",
                    "keepalive_timeout_s",
                    "fault_500", "fault_429", "fault_disconnect", "fault_stall")
    for name in non_negative:
        value = getattr(p, name)
        if not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            return f"{name} must be a number >= 0, got {value!r}"
    if not 0 <= p.jitter < 1:
        return f"jitter must be in [0, 1), got {p.jitter!r}"
    for name in ("max_num_seqs", "max_model_len", "natural_tokens", "events_per_write",
                 "block_size", "num_gpu_blocks"):
        value = getattr(p, name)
        if not isinstance(value, int) or value < 1:
            return f"{name} must be an integer >= 1, got {value!r}"
    if not isinstance(p.max_logprobs, int) or p.max_logprobs < 0:
        return f"max_logprobs must be an integer >= 0, got {p.max_logprobs!r}"
    if p.fault_fraction > 1:
        return f"fault fractions add up to {p.fault_fraction:g}; their sum must be <= 1"
    if not p.model:
        return "model must be a non-empty name"
    return None


# Named presets. "bf16" and "qat" are calibrated to the published L4 study (Gemma 4 E2B
# on vLLM): 51.3 vs 105.1 tok/s single-stream decode, ~619 vs ~1077 tok/s at 16 streams,
# KV cache 723,484 vs 867,999 tokens. They are simulations, not measurements.
PROFILES: dict[str, SimProfile] = {
    "default": SimProfile(),
    "fast": SimProfile(ttft_s=0.0, itl_s=0.0, batch_slowdown=0.0, max_num_seqs=1024),
    "bf16": SimProfile(model="google/gemma-4-E2B-it", ttft_s=0.5, itl_s=1 / 51.3,
                       batch_slowdown=0.022, max_num_seqs=256, jitter=0.02,
                       prefill_s_per_1k_tokens=0.05, num_gpu_blocks=45218),
    "qat": SimProfile(model="google/gemma-4-E2B-it-qat-w4a16-ct", ttft_s=0.5, itl_s=1 / 105.1,
                      batch_slowdown=0.0374, max_num_seqs=256, jitter=0.02,
                      prefill_s_per_1k_tokens=0.03, num_gpu_blocks=54250),
}


def profile_named(name: str, **overrides) -> SimProfile:
    """A preset with some fields replaced; ``None`` overrides are ignored."""
    if name not in PROFILES:
        raise ConfigError(f"unknown simulator profile {name!r}; choose one of {', '.join(PROFILES)}")
    changes = {key: value for key, value in overrides.items() if value is not None}
    return replace(PROFILES[name], **changes)
