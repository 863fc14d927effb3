"""Readiness: ``GET /health`` answers 200 and ``GET /v1/models`` lists the model.

vLLM answers /health once the engine is up, and /v1/models lists the served model id
(the model path or ``--served-model-name``); llama.cpp's server and our simulator
answer both too. One probe is two short GETs; :func:`probe` says why the server is not
ready yet (the last reason is in the timeout's error).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from ..errors import one_line

PROBE_TIMEOUT_S = 2.0  # per GET; a loaded server still answers /health quickly
POLL_S = 0.2  # between probes: time to ready is measured to within this

# Readiness is a direct connection to the server: proxies from the environment are ignored.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, api_key: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _OPENER.open(request, timeout=PROBE_TIMEOUT_S) as reply:
            return reply.status, reply.read(1 << 20)
    except urllib.error.HTTPError as err:
        return err.code, b""


def probe(base_url: str, model: str | None, api_key_env: str | None = None) -> str | None:
    """None when the server is ready; else what is missing, as a short phrase."""
    api_key = os.environ.get(api_key_env) if api_key_env else None
    try:
        status, _ = _get(base_url + "/health", None)
        if status != 200:
            return f"/health answered {status}"
        status, body = _get(base_url + "/v1/models", api_key)
    except (OSError, ValueError) as err:  # refused, reset, timeout, bad status line
        reason = getattr(err, "reason", err)
        return f"no answer from {base_url} ({one_line(reason, 120)})"
    if status != 200:
        return f"/v1/models answered {status}"
    try:
        ids = [str(entry.get("id")) for entry in json.loads(body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        return "/v1/models did not answer an OpenAI model list"
    if model is None:
        return None if ids else "/v1/models lists no model yet"
    if model in ids:
        return None
    return f"/v1/models lists {', '.join(ids) or 'nothing'}, not {model}"
