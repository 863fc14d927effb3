"""A server on another machine, over the system ``ssh`` client.

Every call is one ``ssh -o BatchMode=yes -o ConnectTimeout=15 -- HOST 'sh -c SCRIPT'``:
keys come from the user's agent and ``~/.ssh/config``; batch mode means ssh never asks
for a password or a host-key confirmation, it fails (exit status 255), and that
becomes one line saying how to fix it. The server runs under ``nohup setsid`` in
``~/loadgen-servers/NAME/`` on the host (its own session, so it outlives the ssh
connection and is stopped as a group), writing ``server.log`` and ``server.pid``
there. The log is copied back into the local run directory when the server is
ready, when a start fails and when it stops, so its facts are read where they are for
a local server.
"""

from __future__ import annotations

import math
import shlex
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import ConfigError, TargetError, one_line

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=15")
SSH_CALL_TIMEOUT_S = 60.0
LOG_COPY_BYTES = 16 * 1024 * 1024  # a startup log is far smaller; a week-long one is cut

# ``alive PID``: the process exists and is not a zombie (ps is on every Unix).
_ALIVE = ('alive() { s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; '
          'case "$s" in ""|Z*) return 1;; esac; return 0; }; ')


class SshError(TargetError):
    """ssh itself failed (auth, unknown host, no route): exit status 255."""


def ssh(host: str, script: str, timeout_s: float = SSH_CALL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``script`` with ``sh`` on ``host``; the script's own exit status is the caller's."""
    argv = ["ssh", *SSH_OPTIONS, "--", host, "sh -c " + shlex.quote(script)]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout_s)
    except FileNotFoundError:
        raise ConfigError("ssh not found: install the OpenSSH client to manage servers on "
                          "other hosts (--host)") from None
    except subprocess.TimeoutExpired:
        raise SshError(f"ssh {host} did not finish within {timeout_s:g} s") from None
    if done.returncode == 255:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise SshError(f"ssh {host} failed: {one_line(said[-1] if said else 'exit status 255')} "
                       f"(loadgen runs ssh in batch mode, without password prompts: check that "
                       f"`ssh {host} true` works with your key, agent or ~/.ssh/config)")
    return done


def _out(done: subprocess.CompletedProcess) -> str:
    return done.stdout.decode(errors="replace").strip()


def launch(host: str, remote_dir: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Start ``argv`` on ``host`` under nohup/setsid in ``~/remote_dir``; its pid there."""
    command = " ".join(shlex.quote(a) for a in ["env", *(f"{k}={v}" for k, v in env.items()),
                                                *argv])
    where = shlex.quote(remote_dir)
    script = (
        "command -v setsid >/dev/null || { echo 'setsid not found on the host' >&2; exit 3; }; "
        f"mkdir -p {where} && cd {where} || exit 3; rm -f server.pid; : > server.log; "
        # $$ of the inner sh is the new session's leader; exec keeps that pid for the server.
        "nohup setsid sh -c 'echo $$ > server.pid; exec \"$@\"' sh "
        f"{command} >> server.log 2>&1 < /dev/null & "
        "i=0; while [ ! -s server.pid ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
        "cat server.pid")
    done = ssh(host, script)
    text = _out(done)
    if done.returncode != 0 or not text.isdigit():
        said = done.stderr.decode(errors="replace").strip() or text or f"exit status {done.returncode}"
        raise TargetError(f"could not start the server on {host}: {one_line(said)}")
    return int(text)


def is_alive(host: str, pid: int) -> bool:
    done = ssh(host, _ALIVE + f"if alive {int(pid)}; then echo alive; else echo gone; fi")
    return _out(done) == "alive"


def stop(host: str, pid: int, grace_s: float) -> str:
    """SIGTERM to the group, SIGKILL after ``grace_s``: ``stopped``, ``killed`` or ``gone``."""
    pid = int(pid)
    steps = max(1, math.ceil(grace_s * 10))
    script = (_ALIVE + f"alive {pid} || {{ echo gone; exit 0; }}; "
              f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid}; "
              f"i=0; while alive {pid} && [ $i -lt {steps} ]; do sleep 0.1; i=$((i+1)); done; "
              f"if alive {pid}; then kill -KILL -- -{pid} 2>/dev/null || kill -KILL {pid}; "
              "echo killed; else echo stopped; fi")
    return _out(ssh(host, script, timeout_s=grace_s + SSH_CALL_TIMEOUT_S))


def tail(host: str, remote_dir: str, lines: int) -> list[str]:
    path = shlex.quote(f"{remote_dir}/server.log")
    done = ssh(host, f"tail -n {int(lines)} {path} 2>/dev/null || true")
    return done.stdout.decode(errors="replace").splitlines()


def copy_log(host: str, remote_dir: str, local: Path) -> None:
    """The host's log (its last 16 MiB) into ``local``."""
    path = shlex.quote(f"{remote_dir}/server.log")
    done = ssh(host, f"tail -c {LOG_COPY_BYTES} {path} 2>/dev/null || true")
    local.write_bytes(done.stdout)
