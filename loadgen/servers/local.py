"""A server on this machine: launched in its own session (its own process group), its
output appended to a log file, signalled as a group.

Its own session means Ctrl-C in the terminal (SIGINT to loadgen's group) does not reach
it, and stopping it reaches every process it started (vLLM's engine core, workers): the
group is signalled, not only the pid. Whether the process is still alive is read from
``/proc/PID/stat`` (its state and start time), so a zombie counts as gone and a pid
reused by another program is never signalled; without ``/proc`` (macOS), ``kill -0``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import ConfigError


def launch(argv: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen:
    """Start ``argv`` with loadgen's environment plus ``env``, stdout and stderr into ``log``."""
    with open(log, "ab") as out:  # the child has its own copy of the descriptor
        try:
            return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env={**os.environ, **env},
                                    start_new_session=True, close_fds=True)
        except FileNotFoundError:
            raise ConfigError(f"cannot start the server: {argv[0]!r} not found (is it installed "
                              "and on PATH?)") from None
        except PermissionError:
            raise ConfigError(f"cannot start the server: {argv[0]!r} is not executable") from None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    stat = _stat(pid)
    return int(stat[19]) if stat else None


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def is_alive(pid: int, ticks: int | None) -> bool:
    """Whether the process that was started as ``pid`` (at ``ticks``) still runs."""
    if pid <= 1 or pid == os.getpid():
        return False  # never ours to signal, whatever a state file says
    if Path("/proc/self/stat").exists():
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        # No start time recorded: the process could not be identified, so it is not ours.
        return ticks is not None and int(stat[19]) == ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pid`` leads; False when nothing was there."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


SIGTERM, SIGKILL = signal.SIGTERM, signal.SIGKILL
