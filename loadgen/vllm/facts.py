"""Deployment facts only the server knows: load times, weight memory, KV-cache capacity.

Two sources, each parsed by a pure function (no I/O here):

- vLLM's startup log (a local file, or CloudWatch Logs for a SageMaker endpoint):
  :func:`parse_startup_log`. The lines changed across vLLM 0.8 -> 0.33; the
  regexes below match all of them. 0.11 colours the prefix with ANSI codes, so
  those are stripped first. The SageMaker container restarts vLLM after a crash,
  so a fact can appear several times: the last occurrence wins.
- a running server's Prometheus ``/metrics`` text: :func:`facts_from_metrics`
  reads ``vllm:cache_config_info`` (KV tokens = ``kv_cache_size_tokens`` on new
  versions, else ``num_gpu_blocks`` x ``block_size``); :func:`load_gauges` reads
  the live gauges the run-time sampler records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

from ..errors import TargetError

# The JSON keys of ``loadgen facts --json`` and of the results file's ``server`` facts.
FACT_KEYS = (
    "weights_load_s",
    "model_load_gib",
    "model_load_s",
    "kv_cache_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "max_concurrency_tokens_per_request",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class ServerFacts:
    """What one vLLM start reported; ``None`` for what the source doesn't hold."""

    weights_load_s: float | None = None  # "Loading weights took": after the download
    model_load_gib: float | None = None  # GPU memory the weights take
    model_load_s: float | None = None  # "Model loading took": includes download and setup
    kv_cache_gib: float | None = None  # "Available KV cache memory" (vLLM 0.10+)
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # requests of max_concurrency_tokens_per_request
    max_concurrency_tokens_per_request: int | None = None  # the configured context length

    def to_dict(self) -> dict[str, float | int | None]:
        return {key: getattr(self, key) for key in FACT_KEYS}

    def is_empty(self) -> bool:
        return all(value is None for value in self.to_dict().values())


assert tuple(f.name for f in fields(ServerFacts)) == FACT_KEYS


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


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
    (re.compile(r"KV cache size: ([\d,]+) tokens"), ("kv_cache_tokens",), (_int,)),
    (
        re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", re.IGNORECASE),
        ("max_concurrency_tokens_per_request", "max_concurrency"),
        (_int, _num),
    ),
)


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line)


def parse_startup_log(lines: Iterable[str]) -> ServerFacts:
    """Facts from vLLM startup log lines (any version 0.8.5-0.33); the last occurrence wins."""
    found: dict[str, float | int] = {}
    for raw in lines:
        line = strip_ansi(raw)
        # Cheap pre-check: every fact line contains one of these words.
        if "took" not in line and "KV cache" not in line and "oncurrency" not in line:
            continue
        for pattern, names, converters in _LOG_PATTERNS:
            match = pattern.search(line)
            if match:
                for name, convert, text in zip(names, converters, match.groups()):
                    found[name] = convert(text)
    return ServerFacts(**found)


# ---------------------------------------------------------------------------
# Prometheus /metrics


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
# Human-readable table

_LABELS = {
    "weights_load_s": ("Weight loading", "s"),
    "model_load_gib": ("Model weights in GPU memory", "GiB"),
    "model_load_s": ("Model loading (incl. download)", "s"),
    "kv_cache_gib": ("Available KV-cache memory", "GiB"),
    "kv_cache_tokens": ("KV-cache size", "tokens"),
    "max_concurrency": ("Max concurrency", "x"),
    "max_concurrency_tokens_per_request": ("  at tokens per request", "tokens"),
}


def format_facts_table(facts: ServerFacts) -> str:
    rows = []
    for key, value in facts.to_dict().items():
        label, unit = _LABELS[key]
        if value is None:
            shown = "-"
        elif isinstance(value, int):
            shown = f"{value:,} {unit}"
        else:
            shown = f"{value:,.2f} {unit}"
        rows.append(f"{label:<32} {shown}")
    return "\n".join(rows)
