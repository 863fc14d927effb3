"""What counts as a secret, by its name: one rule for every place that hides secrets.

The deployment record and console (``aws/``) mask the values of secret-looking
environment variables, reports (``report/summary.py``) drop secret-looking keys, and
the MCP server (``mcp/redact.py``) masks the values of secret-looking variables in
everything it returns. All three ask :func:`is_secret_name`.

A name looks secret when it contains SECRET, PASSWORD, PASSWD, CREDENTIAL, SIGNATURE or
AUTHORIZATION, or a word of it ends in KEY, KEYS or TOKEN (any case): ``HF_TOKEN``,
``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``apikey``, ``session_token``. Counts named
``..._TOKENS`` (``SM_VLLM_MAX_NUM_BATCHED_TOKENS``, ``kv_cache_tokens``) and words that
merely start with TOKEN or KEY (``tokenizer``, ``keyboard``) are not secrets.

A secret's *value* is hidden by :func:`redact_values`: wherever the exact value appears
(an API key a server echoes back in its error body), it becomes ``***`` before the text is
stored anywhere (records, results, ``--save-requests``, MCP run folders).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

MASK = "***"

_SECRET_NAME = re.compile(
    r"SECRET|PASSWORD|PASSWD|CREDENTIAL|SIGNATURE|AUTHORIZATION|KEYS?(?![A-Z])|TOKEN(?![A-Z])",
    re.IGNORECASE)


def is_secret_name(name: object) -> bool:
    """Whether a variable or key called ``name`` holds a secret (see the module docstring)."""
    return bool(_SECRET_NAME.search(str(name)))


def redact_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` with the value of every secret-looking name replaced by ``***``."""
    return {key: (MASK if is_secret_name(key) else value) for key, value in environment.items()}


def redact_values(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each (non-empty) secret value replaced by ``***``;
    longest first, so a secret that contains another is hidden whole."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text
