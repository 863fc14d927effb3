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
}


def format_facts_table(facts: ServerFacts) -> str:
    """One line a fact: label, value and unit (``-`` where the source did not say)."""
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
