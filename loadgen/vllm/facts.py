"""Deployment facts only the server knows (load times, weight memory, KV-cache capacity),
and the parser of the first place they appear: vLLM's startup log.

The log is a local file, or CloudWatch Logs for a SageMaker endpoint:
:func:`parse_startup_log` (pure, no I/O). The lines changed across vLLM 0.8 -> 0.33;
the regexes below match all of them. 0.11 colours the prefix with ANSI codes, so
those are stripped first. The SageMaker container restarts vLLM after a crash, so a
fact can appear several times: the last occurrence wins. A running server's
``/metrics`` holds the KV-cache facts too: :mod:`loadgen.vllm.server_metrics`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Iterable

from ..errors import ConfigError

# The JSON keys of ``loadgen facts --json`` and of the results file's ``server`` facts.
FACT_KEYS = (
    "weights_load_s",
    "model_load_gib",
    "model_load_s",
    "kv_cache_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "max_concurrency_tokens_per_request",
    "vllm_version",
    "model",
    "dtype",
    "quantization",
    "max_model_len",
    "cuda_graph_s",
    "cuda_graph_gib",
    "engine_init_s",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class ServerFacts:
    """What one vLLM start reported; ``None`` for what the source doesn't hold."""

    weights_load_s: float | None = None  # "Loading weights took": after the download
    model_load_gib: float | None = None  # GPU memory the weights take
    model_load_s: float | None = None  # "Model loading took": includes download and setup
    kv_cache_gib: float | None = None  # "Available KV cache memory" (vLLM 0.10+; CPU: "set")
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # requests of max_concurrency_tokens_per_request
    max_concurrency_tokens_per_request: int | None = None  # the configured context length
    vllm_version: str | None = None  # "vLLM API server version", the banner, the engine line
    model: str | None = None  # the engine config's model= (a hub id or a local path)
    dtype: str | None = None  # the engine config's dtype= (torch. prefix dropped)
    quantization: str | None = None  # the engine config's quantization= (None: not quantized)
    max_model_len: int | None = None  # the engine config's max_seq_len=
    cuda_graph_s: float | None = None  # "Graph capturing finished in N secs" (GPU only)
    cuda_graph_gib: float | None = None  # "..., took N GiB" of GPU memory for the graphs
    engine_init_s: float | None = None  # "init engine (profile, create kv cache, warmup model)"

    def to_dict(self) -> dict[str, float | int | None]:
        return {key: getattr(self, key) for key in FACT_KEYS}

    def is_empty(self) -> bool:
        return all(value is None for value in self.to_dict().values())


assert tuple(f.name for f in fields(ServerFacts)) == FACT_KEYS


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _text(text: str) -> str:
    return text.strip("'\"")


def _dtype(text: str) -> str:
    return _text(text).removeprefix("torch.")


# (pattern, field names, converters). Searched anywhere in the line, so any prefix
# (process name, level, timestamp, file:line, CloudWatch wrapper) is fine.
_LOG_PATTERNS = (
    (re.compile(r"Loading weights took ([\d.]+) seconds"), ("weights_load_s",), (_num,)),
    (
        re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds"),
        ("model_load_gib", "model_load_s"),
        (_num, _num),
    ),
    (re.compile(r"Available KV cache memory: ([\d.]+) GiB"), ("kv_cache_gib",), (_num,)),
    # The CPU build: "Explicitly set (1.0/9.96) GiB for KV cache on node 0" (from
    # VLLM_CPU_KVCACHE_SPACE), or "Auto set (...)"; the second number is the node's memory.
    (re.compile(r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache"),
     ("kv_cache_gib",), (_num,)),
    (re.compile(r"KV cache size: ([\d,]+) tokens"), ("kv_cache_tokens",), (_int,)),
    (
        re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", re.IGNORECASE),
        ("max_concurrency_tokens_per_request", "max_concurrency"),
        (_int, _num),
    ),
    (re.compile(r"Graph capturing finished in ([\d.]+) secs?, took ([\d.]+) GiB"),
     ("cuda_graph_s", "cuda_graph_gib"), (_num, _num)),
    (re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
     ("engine_init_s",), (_num,)),
    # "vLLM API server version 0.10.2"; newer ones also print a logo, one of whose lines ends
    # "█  version 0.32.0" (other libraries' versions in the log never follow "vLLM" or the logo)
    (re.compile(r"(?:vLLM(?: API server)? version|[█▀▄]\s+version) v?(\d+\.\d+[\w.+-]*)"),
     ("vllm_version",), (str,)),
    (re.compile(r"LLM engine \(v(\d+\.\d+[\w.+-]*)\) with config"), ("vllm_version",), (str,)),
    # The engine's config line: "model='google/gemma-3n-E2B-it', ..., dtype=torch.bfloat16,
    # max_seq_len=4096, ..., quantization=compressed-tensors, ..."
    (re.compile(r"with config: .*?\bmodel=('[^']*'|[^,\s]+)"), ("model",), (_text,)),
    (re.compile(r"with config: .*?\bdtype=([^,\s]+)"), ("dtype",), (_dtype,)),
    (re.compile(r"with config: .*?\bmax_seq_len=(\d+)"), ("max_model_len",), (_int,)),
    (re.compile(r"with config: .*?\bquantization=([^,\s]+)"), ("quantization",), (_text,)),
)


# Cheap pre-check: every fact line contains one of these.
_WORDS = ("took", "KV cache", "oncurrency", "finished in", "version", "with config")


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line)


def parse_startup_log(lines: Iterable[str]) -> ServerFacts:
    """Facts from vLLM startup log lines (any version 0.8.5-0.33); the last occurrence wins."""
    found: dict[str, float | int] = {}
    for raw in lines:
        line = strip_ansi(raw)
        if not any(word in line for word in _WORDS):
            continue
        for pattern, names, converters in _LOG_PATTERNS:
            match = pattern.search(line)
            if match:
                for name, convert, text in zip(names, converters, match.groups()):
                    found[name] = convert(text)
    if found.get("quantization") == "None":  # said, and it says "not quantized"
        del found["quantization"]
    return ServerFacts(**found)


def facts_from_log_file(path: str, option: str) -> ServerFacts:
    """:func:`parse_startup_log` of a log file; ``option`` names it in the one-line error
    (``--log``, ``log_file``) when the file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_startup_log(handle)
    except OSError as err:
        raise ConfigError(f"cannot read {option} {path}: {err.strerror}") from None
