"""Deployment facts as a table for people: what ``loadgen facts``, ``loadgen endpoint
deploy`` and the MCP ``facts`` tool print (the JSON forms are ``ServerFacts.to_dict()``)."""

from __future__ import annotations

from .facts import ServerFacts

_LABELS = {
    "weights_load_s": ("Weight loading", "s"),
    "model_load_gib": ("Model weights in GPU memory", "GiB"),
    "model_load_s": ("Model loading (incl. download)", "s"),
    "kv_cache_gib": ("Available KV-cache memory", "GiB"),
    "kv_cache_tokens": ("KV-cache size", "tokens"),
    "max_concurrency": ("Max concurrency", "x"),
    "max_concurrency_tokens_per_request": ("  at tokens per request", "tokens"),
    "vllm_version": ("vLLM version", ""),
    "model": ("Model", ""),
    "dtype": ("dtype", ""),
    "quantization": ("Quantization", ""),
    "max_model_len": ("Max model length", "tokens"),
    "cuda_graph_s": ("CUDA-graph capture", "s"),
    "cuda_graph_gib": ("  GPU memory for the graphs", "GiB"),
    "engine_init_s": ("Engine init (profile, KV, warmup)", "s"),
}


def format_facts_table(facts: ServerFacts) -> str:
    """One line a fact: label, value and unit (``-`` where the source did not say)."""
    rows = []
    for key, value in facts.to_dict().items():
        label, unit = _LABELS[key]
        if value is None:
            shown = "-"
        elif isinstance(value, str):
            shown = value
        elif isinstance(value, int):
            shown = f"{value:,} {unit}"
        else:
            shown = f"{value:,.2f} {unit}"
        rows.append(f"{label:<34} {shown}")
    return "\n".join(rows)
