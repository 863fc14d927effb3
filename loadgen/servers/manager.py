"""Start a server, wait until it is ready, find it again, stop it: :func:`start_server`,
:func:`find_server`, :class:`ManagedServer`.

    spec = ServerSpec(("vllm", "serve", "{model}", "--port", "{port}"), model="Qwen/Qwen3-0.6B")
    with start_server(spec, Path("runs/qwen")) as server:   # blocks until ready
        print(server.url, server.state.time_to_ready_s, server.state.facts)
    # stopped here: SIGTERM to its process group, SIGKILL after spec.stop_grace_s

Blocking code (subprocess, short HTTP probes, sleeps); async callers run
:func:`start_server` in a thread and pass ``cancel`` (a :class:`threading.Event`).
A start that fails (the process exits, the ready timeout passes, Ctrl-C, ``cancel``)
stops what it launched before raising: loadgen leaves no server behind that it
could not hand over. Only a SIGKILL of loadgen itself can: then the state file
(:mod:`.state`) names it for ``loadgen server status|stop``.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from subprocess import Popen

from ..errors import ConfigError, LoadgenError, RunStopped, TargetError, one_line
from ..record import now_iso
from ..vllm.facts import facts_from_log_file
from . import local, remote
from .ready import POLL_S, probe
from .spec import DEFAULT_STOP_GRACE_S, ServerSpec, public_command
from .state import (
    EXITED,
    FAILED,
    LIVE_STATUSES,
    READY,
    STARTING,
    STOPPED,
    ServerState,
    load_state,
    log_path,
    save_state,
    state_path,
)

TAIL_LINES = 20  # the log lines a failed start shows
REMOTE_CHECK_S = 5.0  # how often a remote process's liveness is asked (one ssh call)
KILL_WAIT_S = 10.0  # after SIGKILL, how long to wait for the process to be gone
_TAIL_BYTES = 256 * 1024


class ServerStartError(TargetError):
    """The server exited or was not ready in time; ``tail``: its log's last lines."""

    exit_code = 1  # not bad input: the server failed

    def __init__(self, message: str, tail: list[str], state: ServerState) -> None:
        super().__init__(message)
        self.tail = tail
        self.state = state


class ManagedServer:
    """A server loadgen started (or found again from its state file)."""

    def __init__(self, run_dir: Path, state: ServerState, popen: Popen | None = None,
                 stop_grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        self.run_dir = Path(run_dir)
        self.state = state
        self.stop_grace_s = stop_grace_s  # what stop() and leaving a ``with`` block use
        self._popen = popen  # set when this process launched it (locally)
        self._remote_alive: tuple[float, bool] | None = None  # (when asked, answer)

    @property
    def url(self) -> str:
        return self.state.url

    @property
    def log_file(self) -> Path:
        return log_path(self.run_dir)

    def __enter__(self) -> "ManagedServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- liveness and logs

    def alive(self, max_age_s: float = 0.0) -> bool:
        """Whether the process still runs (a remote answer up to ``max_age_s`` old is reused)."""
        pid = self.state.pid
        if pid is None:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        if self.state.host is None:
            return local.is_alive(pid, self.state.start_ticks)
        now = time.monotonic()
        if self._remote_alive is None or now - self._remote_alive[0] >= max_age_s:
            self._remote_alive = (now, remote.is_alive(self.state.host, pid))
        return self._remote_alive[1]

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        """The log's last ``lines`` lines (a remote host's log is read there)."""
        if self.state.host is not None and self.state.remote_dir:
            return remote.tail(self.state.host, self.state.remote_dir, lines)
        return tail_file(self.log_file, lines)

    def _copy_log(self) -> None:
        """A remote log into the run directory (where facts are read from). A copy that
        fails (ssh dropped) leaves the last copy: the log is news, not the outcome."""
        if self.state.host is not None and self.state.remote_dir:
            try:
                remote.copy_log(self.state.host, self.state.remote_dir, self.log_file)
            except TargetError:
                pass

    def _save(self, **changes: object) -> ServerState:
        self.state = self.state.replace(**changes)
        save_state(self.run_dir, self.state)
        return self.state

    # ---------------------------------------------------------------- stop

    def stop(self, grace_s: float | None = None) -> ServerState:
        """SIGTERM to the server's process group; SIGKILL after ``grace_s`` seconds (default:
        the spec's ``stop_grace_s``). Safe to call again, and on a server that already exited."""
        grace_s = self.stop_grace_s if grace_s is None else grace_s
        began = time.monotonic()
        if self.state.host is not None and self.state.pid is not None:
            outcome = remote.stop(self.state.host, self.state.pid, grace_s)
            how = {"stopped": "SIGTERM", "killed": "SIGKILL"}.get(outcome)
            self._copy_log()
        else:
            how = self._stop_local(grace_s)
        code = self._popen.poll() if self._popen is not None else None
        if how is None:  # it was gone already
            status = self.state.status if self.state.status not in LIVE_STATUSES else EXITED
            return self._save(status=status, exit_code=code if code is not None
                              else self.state.exit_code)
        return self._save(status=STOPPED, stopped_at=now_iso(), exit_code=code,
                          stop={"signal": how, "seconds": round(time.monotonic() - began, 3)})

    def _stop_local(self, grace_s: float) -> str | None:
        pid = self.state.pid
        if pid is None or not self.alive():
            return None
        local.signal_group(pid, local.SIGTERM)
        how = "SIGTERM"
        if not self._wait_gone(grace_s):
            how = "SIGKILL"
            local.signal_group(pid, local.SIGKILL)
            self._wait_gone(KILL_WAIT_S)
        # Anything the server started and left in its group (vLLM's engine core) goes too.
        local.signal_group(pid, local.SIGKILL)
        return how

    def _wait_gone(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    # ---------------------------------------------------------------- readiness

    def _wait_ready(self, spec: ServerSpec, started: float,
                    cancel: threading.Event | None) -> float:
        """Seconds from launch until ready; raises when the process exits or time runs out."""
        deadline = started + spec.ready_timeout_s
        while True:
            if cancel is not None and cancel.is_set():
                raise RunStopped("stopped while the server was starting")
            if not self.alive(max_age_s=REMOTE_CHECK_S):
                code = self._popen.poll() if self._popen is not None else None
                raise self._failure(EXITED, f"the server exited{_code(code)} "
                                    f"{time.monotonic() - started:.1f} s after start, before "
                                    "it was ready", code)
            reason = probe(spec.url(), spec.model, spec.api_key_env)
            if reason is None:
                return time.monotonic() - started
            if time.monotonic() >= deadline:
                raise self._failure(FAILED, f"the server was not ready within "
                                    f"{spec.ready_timeout_s:g} s ({reason}); it was stopped")
            if cancel is not None:
                cancel.wait(POLL_S)
            else:
                time.sleep(POLL_S)

    def _failure(self, status: str, message: str, code: int | None = None) -> ServerStartError:
        self._copy_log()
        tail = [line for line in tail_file(self.log_file, TAIL_LINES) if line.strip()]
        last = f"; its log ({self.log_file}) ends: {one_line(tail[-1], 200)}" if tail else \
            f"; its log ({self.log_file}) is empty"
        state = self._save(status=status, error=message, exit_code=code)
        return ServerStartError(message + last, tail, state)


def _code(code: int | None) -> str:
    if code is None:
        return ""
    return f" (signal {-code})" if code < 0 else f" (exit code {code})"


def tail_file(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a file (reads at most its last 256 KiB)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - _TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:] if lines > 0 else []


_NOT_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _remote_dir(run_dir: Path) -> str:
    """Where on the host: ``loadgen-servers/<run dir name>-<time>`` under its home."""
    name = _NOT_NAME.sub("-", Path(run_dir).resolve().name).strip("-.") or "server"
    return f"loadgen-servers/{name[:60]}-{time.strftime('%Y%m%d-%H%M%S')}"


def _refuse_if_running(run_dir: Path) -> None:
    if not state_path(run_dir).exists():
        return
    earlier = ManagedServer(run_dir, load_state(run_dir))
    if earlier.state.status in LIVE_STATUSES and earlier.alive():
        raise TargetError(f"a server started from {run_dir} is still running (pid "
                          f"{earlier.state.pid}); stop it first: loadgen server stop "
                          f"--dir {run_dir}")


def start_server(spec: ServerSpec, run_dir: Path, *,
                 cancel: threading.Event | None = None) -> ManagedServer:
    """Launch ``spec``'s command, wait until it is ready, and return it running.

    ``run_dir`` gets ``server.json`` (the state) and ``server.log`` (its output). Raises
    :class:`ServerStartError` (exited, or not ready in ``spec.ready_timeout_s``; the
    process is stopped), :class:`~loadgen.errors.RunStopped` when ``cancel`` is set, and
    ConfigError/TargetError when it cannot be launched (not found, ssh refused).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _refuse_if_running(run_dir)
    spec = spec.with_free_port()
    argv = spec.argv()
    log = log_path(run_dir)
    if log.is_symlink() or (log.exists() and not log.is_file()):
        raise ConfigError(f"{log} is not a regular file (a link or a device?); loadgen will "
                          "not write through it: remove it or choose another directory")
    log.write_bytes(b"")  # one log per start
    state = ServerState(status=STARTING, command=public_command(argv), url=spec.url(),
                        port=spec.port, host=spec.host, model=spec.model,
                        started_at=now_iso())
    started = time.monotonic()
    popen = None
    if spec.host is None:
        popen = local.launch(argv, spec.env, log)
        state = state.replace(pid=popen.pid, start_ticks=local.start_ticks(popen.pid))
    else:
        remote_dir = _remote_dir(run_dir)
        state = state.replace(remote_dir=remote_dir,
                              pid=remote.launch(spec.host, remote_dir, argv, spec.env))
    save_state(run_dir, state)
    server = ManagedServer(run_dir, state, popen, spec.stop_grace_s)
    try:
        ready_s = server._wait_ready(spec, started, cancel)
        server._copy_log()
    except BaseException as exc:  # exited, timed out, Ctrl-C, cancelled: leave nothing running
        _stop_failed_start(server, spec, exc)
        raise
    facts = facts_from_log_file(str(log), "server log").to_dict()
    server._save(status=READY, time_to_ready_s=round(ready_s, 3),
                 facts={k: v for k, v in facts.items() if v is not None})
    return server


def _stop_failed_start(server: ManagedServer, spec: ServerSpec, exc: BaseException) -> None:
    """Stop a server whose start failed; its state keeps why (exited, failed)."""
    status = server.state.status if server.state.status in (FAILED, EXITED) else FAILED
    error = server.state.error or f"stopped before it was ready ({type(exc).__name__})"
    try:
        server.stop(spec.stop_grace_s)
    except LoadgenError as stop_error:  # e.g. ssh gone too: say so, keep the first error
        error += f"; stopping it failed too: {stop_error}"
    server._save(status=status, error=error)


def find_server(run_dir: Path) -> ManagedServer:
    """The server whose state is in ``run_dir`` (running or not: ask :meth:`~ManagedServer.alive`)."""
    return ManagedServer(Path(run_dir), load_state(Path(run_dir)))
