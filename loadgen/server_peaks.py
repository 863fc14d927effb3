"""What the server did over a level, read from the results file's ``server_metrics``
section (as :class:`loadgen.vllm.server_metrics.ServerMetricsSampler` writes it): pure
code over plain dicts, for the knee search, the CLI table and the report."""

from __future__ import annotations

from typing import Any

# A queue is "growing" when its mean over the last third of a level's samples exceeds the
# first third's by more than this many requests.
GROWING_BY = 1.0


def peaks(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the server did over a level, from its :meth:`ServerMetricsSampler.snapshot`
    (as the results file holds it): KV-cache peak %, waiting peak and whether the queue
    grew, running peak, preemptions, vLLM's own mean TTFT and the client's share beside
    it. None: no samples."""
    if not snapshot:
        return None
    summary = snapshot.get("summary") or {}
    waiting = [v for v in (snapshot.get("samples") or {}).get("num_requests_waiting") or []
               if v is not None]
    third = len(waiting) // 3
    growing = (third > 0 and sum(waiting[-third:]) / third - sum(waiting[:third]) / third
               > GROWING_BY)
    kv = (summary.get("kv_cache_usage_perc") or {}).get("max")
    ttft = (((snapshot.get("totals") or {}).get("histograms") or {}).get("ttft") or {})
    return {"kv_peak_percent": None if kv is None else round(100 * kv, 1),
            "waiting_peak": (summary.get("num_requests_waiting") or {}).get("max"),
            "waiting_growing": growing,
            "running_peak": (summary.get("num_requests_running") or {}).get("max"),
            "preemptions": snapshot.get("preemptions"),
            "server_ttft_mean_ms": ttft.get("mean_ms"),
            "client_minus_server_ttft_ms": (snapshot.get("client_minus_server_ms") or {}).get(
                "ttft_mean")}
