"""No credential leaves the server: every tool result and resource is scrubbed here.

The libraries underneath already keep secrets out of what they write (deployment
records mask secret-looking environment values, AWS errors are masked, API keys are
only ever read from the environment). This is the last boundary: any value of a
secret-looking environment variable (:func:`loadgen.redact.is_secret_name`: AWS
credentials, ``HF_TOKEN``, ``OPENAI_API_KEY``, ...) that still appears in an output is
replaced by ``***``.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from ..redact import is_secret_name, redact_values

# Which values: the whole environment is scanned here, and its shorter values (a "1", a
# "true") would mask ordinary text; real credentials are longer. How they are masked is
# loadgen.redact.redact_values, the one rule (also the AWS errors' and the records').
_MIN_SECRET_LENGTH = 8


def secret_values(environ: Mapping[str, str] | None = None,
                  extra: Iterable[str] = ()) -> list[str]:
    """Values to mask, longest first (so a secret containing another is masked whole)."""
    environ = os.environ if environ is None else environ
    values = {value for name, value in environ.items() if is_secret_name(name)}
    values.update(extra)
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LENGTH), key=len, reverse=True)


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every secret replaced by ``***``."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact_values(value, secrets)
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    return value
