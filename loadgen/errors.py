"""One exception tree for everything loadgen raises at a user.

Third-party exceptions (aiohttp, botocore, yaml, ...) are mapped into these at
one boundary each (the target, the control plane, the scenario loader), so the
CLI only has to catch :class:`LoadgenError` to print one line and exit non-zero.

Request-level failures during a run are *not* exceptions: they are data on the
:class:`loadgen.record.RequestRecord` (``error_type``), counted by type.
"""

from __future__ import annotations


def one_line(value: object, limit: int = 300) -> str:
    """``value`` as one line of at most ``limit`` characters (white space folded; a cut
    line ends with ``...`` so that a reader knows there was more)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LoadgenError(Exception):
    """A problem the user can fix; ``str(err)`` is a single line saying how."""

    exit_code = 2


class ConfigError(LoadgenError):
    """Bad options, conflicting flags, malformed scenario or prompt file."""


class TargetError(LoadgenError):
    """The target can't be used: unreachable, wrong URL, not an OpenAI server, bad model."""


class AuthError(TargetError):
    """Missing or rejected credentials (API key, AWS credentials, signature)."""


class AwsError(LoadgenError):
    """An AWS control-plane call failed; the message is the mapped one-liner."""


class RunStopped(LoadgenError):
    """The run was stopped (Ctrl-C, SIGTERM, ``RunControl.stop``) before any load was sent."""

    exit_code = 130
