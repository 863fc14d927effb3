"""Request options shared by every target: what to ask the model for, and timeouts."""

from __future__ import annotations

from dataclasses import dataclass

APIS = ("chat", "completions")
# How HTTP requests go out: "stream" (loadgen's own asyncio.Protocol transport, the default)
# or "aiohttp" (aiohttp's client, kept to compare against).
TRANSPORTS = ("stream", "aiohttp")
# How loadgen's simulator (loadgen mock-server, --simulate) announces itself, so no run
# against it can pass for a real model: a header on every response, and the owner of its
# /v1/models cards (vLLM says "vllm"). A client seeing either records ``simulated: true``.
SIMULATOR_HEADER = "X-Loadgen-Simulator"
SIMULATOR_OWNER = "loadgen-simulator"


@dataclass(frozen=True)
class Timeouts:
    """Seconds. ``idle_s`` bounds the gap between two reads of a streamed body."""

    connect_s: float = 10.0
    total_s: float = 600.0
    idle_s: float = 120.0


@dataclass(frozen=True)
class RequestOptions:
    api: str = "chat"  # "chat" -> /v1/chat/completions, "completions" -> /v1/completions
    model: str | None = None  # None: ask the server (/v1/models) at preflight
    stream: bool = True
    temperature: float = 0.0
    ignore_eos: bool = True  # vLLM extension: generate exactly max_tokens
    continuous_usage: bool = False  # vLLM stream_options.continuous_usage_stats
    keep_text: bool = False  # keep generated text on records (fidelity runs)
    api_key_env: str = "OPENAI_API_KEY"  # name of the env var holding the key, never the key
    timeouts: Timeouts = Timeouts()
    transport: str = "stream"  # HTTP targets: one of TRANSPORTS

