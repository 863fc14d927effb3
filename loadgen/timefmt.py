"""Wall-clock time as loadgen writes it: always UTC, in one of two forms.

- :func:`now_iso` / :func:`iso`: ISO 8601 to the second with its offset,
  ``2026-12-02T01:46:16+00:00`` (``datetime.fromisoformat`` reads it back): the
  ``started_at``/``created_at``/``generated_at`` fields of results, records, reports and
  state files, and the dates in log headers.
- :func:`stamp`: a compact UTC stamp, ``20261202-014616``, for names (default results and
  log file names, run and deployment ids) that must sort by time and fit in a file name.

Never used to measure anything: durations come from the monotonic clock (:mod:`loadgen.clock`).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

STAMP = "%Y%m%d-%H%M%S"


def iso(when: float | datetime) -> str:
    """``when`` (seconds since the epoch, or an aware datetime such as botocore's, which are
    in local time) as UTC ISO 8601 to the second."""
    if isinstance(when, datetime):
        return when.astimezone(timezone.utc).isoformat(timespec="seconds")
    return datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")


def now_iso() -> str:
    """Now, as UTC ISO 8601 to the second."""
    return iso(time.time())


def stamp(epoch_s: float | None = None, fmt: str = STAMP) -> str:
    """``epoch_s`` (default: now) as a compact UTC stamp (``fmt``: a ``strftime`` format)."""
    return time.strftime(fmt, time.gmtime(epoch_s))
