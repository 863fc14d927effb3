"""Request options shared by every target: what to ask the model for, and timeouts.

Each option is declared once, here, with its flag, help, unit and bounds
(:func:`loadgen.option.option`); every front door is generated from these fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from .option import option

APIS = ("chat", "completions")
# How HTTP requests go out: "stream" (loadgen's own asyncio.Protocol transport, the default)
# or "aiohttp" (aiohttp's client, kept to compare against).
TRANSPORTS = ("stream", "aiohttp")
# How loadgen's simulator (loadgen mock-server, --simulate) announces itself, so no run
# against it can pass for a real model: a header on every response, and the owner of its
# /v1/models cards (vLLM says "vllm"). A client seeing either records ``simulated: true``.
SIMULATOR_HEADER = "X-Loadgen-Simulator"
SIMULATOR_OWNER = "loadgen-simulator"
_T = "Timeouts (per request)"


@dataclass(frozen=True)
class Timeouts:
    """Seconds. ``idle_s`` bounds the gap between two reads of a streamed body."""

    connect_s: float = option(10.0, _T, "Seconds to open a connection.", metavar="S",
                              low=0, low_open=True, key="connect_timeout")
    total_s: float = option(600.0, _T, "Seconds a request may take in total.", metavar="S",
                            low=0, low_open=True, key="timeout")
    idle_s: float = option(120.0, _T, "Most seconds between two reads of a stream.",
                           metavar="S", low=0, low_open=True, key="idle_timeout")


@dataclass(frozen=True)
class RequestOptions:
    # "chat" -> /v1/chat/completions, "completions" -> /v1/completions
    api: str = option("chat", "Target", "OpenAI API the requests use.", choices=APIS)
    model: str | None = option(None, "Target", "Model id sent with each request.",
                               none_means="ask the server's /v1/models")
    stream: bool = option(True, "Requests", "Stream tokens (--no-stream: TTFT is the whole "
                          "latency).", negatable=True)
    temperature: float = option(0.0, "Requests", "Sampling temperature.", low=0, high=2)
    ignore_eos: bool = option(True, "Requests", "vLLM: generate exactly --output-tokens.",
                              negatable=True)
    continuous_usage: bool = option(False, "Requests", "Ask vLLM for per-chunk usage (exact "
                                    "tokens per chunk).")  # stream_options.continuous_usage_stats
    keep_text: bool = False  # keep generated text on records (fidelity runs)
    # the name of the env var holding the key, never the key
    api_key_env: str = option("OPENAI_API_KEY", "Target", "Environment variable holding the "
                              "API key.")
    timeouts: Timeouts = Timeouts()
    transport: str = option("stream", "Target", "HTTP client: loadgen's streaming transport, "
                            "or aiohttp (to compare).", choices=TRANSPORTS)
