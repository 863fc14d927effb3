"""The words for how a run (a load run, a scenario phase, an MCP run) stands, in files and
outputs: one vocabulary.

``complete`` is the only word for "ended after doing everything it was asked":
``completed`` (written by MCP's ``run.json`` before 0.1.0's vocabulary was settled) is
read as ``complete`` by :func:`read_status`. Request counts keep the noun-like
``completed`` (how many requests completed), a different thing.
"""

from __future__ import annotations

RUNNING = "running"
COMPLETE = "complete"
FAILED = "failed"
INTERRUPTED = "interrupted"  # stopped by a signal (Ctrl-C, SIGTERM)
CANCELLED = "cancelled"  # stopped on request (MCP cancel_run)
STOPPED = "stopped"  # stopped by a limit (MCP --max-duration)
SKIPPED = "skipped"
ABANDONED = "abandoned"  # a file says running, but nothing runs it any more

_OLD_WORDS = {"completed": COMPLETE}


def read_status(word: str) -> str:
    """A status read from a file, in today's vocabulary (older files wrote ``completed``)."""
    return _OLD_WORDS.get(word, word)
