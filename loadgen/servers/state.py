"""The state file: what ``server status|logs|stop`` need to find a server again.

``DIR/server.json`` is written (atomically) when the process is launched, again when
it is ready, and when it stops. It outlives loadgen: if loadgen is killed (even with
SIGKILL) while a server runs, the server keeps running in its own process group and
this file still names it (pid, the process's start time, host, log), so
``loadgen server status --dir DIR`` finds it and ``loadgen server stop --dir DIR``
stops it. The start time guards against a recycled pid: a different process that
later got the same pid is never signalled.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from ..errors import ConfigError

SCHEMA = "loadgen.server/1"
STATE_FILE = "server.json"
LOG_FILE = "server.log"

STARTING, READY, STOPPED, EXITED, FAILED = "starting", "ready", "stopped", "exited", "failed"
LIVE_STATUSES = (STARTING, READY)  # the process may still be running


@dataclass(frozen=True)
class ServerState:
    """One managed server, as its state file holds it."""

    status: str
    command: list[str]  # as started, secrets masked (spec.public_command)
    url: str
    port: int
    pid: int | None = None  # on ``host`` when remote; process-group leader (pgid == pid)
    start_ticks: int | None = None  # /proc/PID/stat start time: this pid, not a reused one
    host: str | None = None  # user@vm; None: this machine
    remote_dir: str | None = None  # on the host, relative to its home: server.log, server.pid
    model: str | None = None
    started_at: str | None = None  # ISO time
    time_to_ready_s: float | None = None  # launch to /health 200 and the model listed
    stopped_at: str | None = None
    exit_code: int | None = None
    stop: dict[str, Any] | None = None  # how it was stopped: signal, seconds
    error: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # from its log (loadgen.vllm.facts)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **dataclasses.asdict(self)}

    def replace(self, **changes: Any) -> "ServerState":
        return dataclasses.replace(self, **changes)


def state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def log_path(run_dir: Path) -> Path:
    return Path(run_dir) / LOG_FILE


def save_state(run_dir: Path, state: ServerState) -> Path:
    return write_atomic(state_path(run_dir), json.dumps(state.to_json(), indent=2) + "\n")


def load_state(run_dir: Path) -> ServerState:
    """The state in ``run_dir``; ConfigError (one line) when there is none or it is not ours."""
    path = state_path(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no server state in {run_dir} ({STATE_FILE} is missing): give the "
                          "--dir a server was started with") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or data.pop("schema", None) != SCHEMA:
        raise ConfigError(f"{path} is not a loadgen server state file")
    known = {f.name for f in dataclasses.fields(ServerState)}
    try:
        return ServerState(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise ConfigError(f"{path} is incomplete: {exc}") from None
