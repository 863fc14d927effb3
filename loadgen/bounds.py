"""Upper bounds on what a run may be asked to do, checked before any load is sent.

Every front door (CLI, API, scenarios, MCP) builds the same dataclasses
(:class:`~loadgen.workload.settings.WorkloadSettings`,
:class:`~loadgen.workload.prompts.PromptSource`), whose validation asks this module, so a value too large to be meant (``--input-tokens
1e11`` would build a 3.8 GB prompt) is one line before anything is sent.

- Tokens per request: input and output at most 1,000,000 each by default; raise (or
  lower) them with the environment variables ``LOADGEN_MAX_INPUT_TOKENS`` and
  ``LOADGEN_MAX_OUTPUT_TOKENS`` (an environment variable reaches every front door, workers
  included, without one more option to declare).
- Trace timestamps: finite and at most :data:`MAX_TRACE_MS` (about 30 years), so the
  replay's nanosecond offsets stay integers.
- Scenario files: at most :data:`MAX_SCENARIO_BYTES` (1 MiB), read only when regular files.
- Text in scenario files (paths, names, URLs): at most :data:`MAX_TEXT_CHARS` characters;
  a host name's labels at most 63 characters, the whole name at most 253 (RFC 1035).
"""

from __future__ import annotations

import math
import os
from urllib.parse import urlsplit

from .errors import ConfigError

DEFAULT_MAX_TOKENS = 1_000_000
MAX_INPUT_ENV = "LOADGEN_MAX_INPUT_TOKENS"
MAX_OUTPUT_ENV = "LOADGEN_MAX_OUTPUT_TOKENS"
MAX_TRACE_MS = 1e12
MAX_TEXT_CHARS = 4096  # PATH_MAX on Linux
MAX_SCENARIO_BYTES = 1 << 20  # a scenario is a page of YAML, not a data file
MAX_LABEL_CHARS, MAX_HOST_CHARS = 63, 253


def _limit(env: str) -> int:
    text = os.environ.get(env)
    if text is None or not text.strip():
        return DEFAULT_MAX_TOKENS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{env} must be a whole number of tokens >= 1 (got {shown(text)})")
    return value


def max_input_tokens() -> int:
    """Largest prompt, in tokens (``LOADGEN_MAX_INPUT_TOKENS``, default 1,000,000)."""
    return _limit(MAX_INPUT_ENV)


def max_output_tokens() -> int:
    """Largest ``max_tokens`` (``LOADGEN_MAX_OUTPUT_TOKENS``, default 1,000,000)."""
    return _limit(MAX_OUTPUT_ENV)


def input_tokens_problem(value: float, what: str = "--input-tokens") -> str | None:
    """Why ``value`` input tokens is too many (None: it is not)."""
    return _tokens_problem(value, what, MAX_INPUT_ENV)


def output_tokens_problem(value: float, what: str = "--output-tokens") -> str | None:
    """Why ``value`` output tokens is too many (None: it is not)."""
    return _tokens_problem(value, what, MAX_OUTPUT_ENV)


def _tokens_problem(value: float, what: str, env: str) -> str | None:
    limit = _limit(env)
    if value <= limit:
        return None
    return (f"{_subject(what)} {value:,.0f} tokens, above the limit of {limit:,} "
            f"(set {env} to allow more)")


def _subject(what: str) -> str:
    """``--input-tokens is`` (or just ``is`` where the caller names the value itself)."""
    return what if what == "is" else f"{what} is"


def timestamp_problem(value: float) -> str | None:
    """Why a trace timestamp (ms) cannot be replayed (None: it can)."""
    if not math.isfinite(value):
        return f"timestamp must be a finite number of milliseconds (got {value!r})"
    if not 0 <= value <= MAX_TRACE_MS:
        return f"timestamp must be milliseconds between 0 and {MAX_TRACE_MS:.0e} (got {value!r})"
    return None


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for a one-line message, cut to ``limit`` characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def text_problem(value: str) -> str | None:
    """Why a text value (a path, a name, a URL) is unusable (None: it is not)."""
    if len(value) > MAX_TEXT_CHARS:
        return f"is {len(value):,} characters long; at most {MAX_TEXT_CHARS:,}"
    if "\x00" in value:
        return "contains a NUL character"
    return None


def host_problem(url: str) -> str | None:
    """Why the host name of ``url`` cannot be a host (None: it can, or there is none)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if len(host) > MAX_HOST_CHARS:
        return f"has a host name of {len(host)} characters; at most {MAX_HOST_CHARS}"
    for label in host.split("."):
        if len(label) > MAX_LABEL_CHARS:
            return (f"has a host name label of {len(label)} characters ({label[:20]}...); "
                    f"each label between dots is at most {MAX_LABEL_CHARS}")
    return None
