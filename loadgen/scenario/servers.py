"""A phase's ``server:`` block: start the server before the phase, stop it after,
whatever happens in between (failure, Ctrl-C) — or, with ``keep_running: true``, keep
it for the next phase of the same checkpoint (A-B-A with both servers in memory) and
stop it when the run ends.

The manager (:mod:`loadgen.servers`) is blocking code, so a start runs in a worker
thread; a stop of the run (Ctrl-C) sets its ``cancel`` event, and the half-started
server is stopped. Each server's state file and log are in ``DIR/servers/<label>/``
(``loadgen server status --dir DIR/servers/<label>`` finds one again after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import AsyncIterator, Callable

from ..engine import RunControl
from ..results import server_section
from ..servers import ManagedServer, ServerSpec, ServerStartError, start_server
from .phase import Endpoint, PhaseDoc
from .schema import Phase, Scenario

Log = Callable[[str], None]


def server_spec(scenario: Scenario, phase: Phase) -> ServerSpec:
    block = phase.server
    assert block is not None
    return ServerSpec(block.command, model=block.model, port=block.port, host=block.host,
                      env=block.env, ready_timeout_s=block.ready_timeout,
                      stop_grace_s=block.stop_grace, api_key_env=scenario.request.api_key_env)


def server_dir(out_dir: Path, label: str) -> Path:
    return out_dir / "servers" / label


class ServerPool:
    """Servers kept running for later phases (``keep_running``), one per checkpoint."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[ServerSpec, ManagedServer]] = {}

    def take(self, checkpoint: str, spec: ServerSpec) -> ManagedServer | None:
        """The kept server of ``checkpoint`` if it was started from the same spec and runs."""
        kept = self.kept.get(checkpoint)
        if kept is None or kept[0] != spec or not kept[1].alive(max_age_s=0):
            return None
        return kept[1]

    async def keep(self, checkpoint: str, spec: ServerSpec, server: ManagedServer,
                   log: Log) -> None:
        earlier = self.kept.get(checkpoint)
        if earlier is not None and earlier[1] is not server:  # replaced: a different spec
            await _stop(earlier[1], earlier[0], log)
        self.kept[checkpoint] = (spec, server)

    async def stop_all(self, log: Log) -> None:
        while self.kept:
            checkpoint, (spec, server) = self.kept.popitem()
            await _stop(server, spec, lambda message, name=checkpoint: log(f"[{name}] {message}"))


async def _stop(server: ManagedServer, spec: ServerSpec, log: Log) -> None:
    state = await asyncio.to_thread(server.stop, spec.stop_grace_s)
    how = f" by {state.stop['signal']} in {state.stop['seconds']} s" if state.stop else ""
    log(f"server at {server.url} stopped{how}")


def server_facts(server: ManagedServer, reused: bool) -> dict:
    """The phase file's ``server`` block for a managed server."""
    state = server.state
    return server_section("managed", state.facts, time_to_ready_s=state.time_to_ready_s,
                          server_reused=reused, server_url=state.url, server_host=state.host,
                          server_dir=str(server.run_dir), server_command=state.command)


@contextlib.asynccontextmanager
async def served(scenario: Scenario, phase: Phase, out_dir: Path, doc: PhaseDoc,
                 control: RunControl, pool: ServerPool, log: Log) -> AsyncIterator[Endpoint]:
    """Start (or reuse) the phase's server, yield its endpoint, stop it (unless kept)."""
    spec = server_spec(scenario, phase)
    server = pool.take(phase.checkpoint, spec)
    reused = server is not None
    if server is not None:
        log(f"reusing the {phase.checkpoint} server at {server.url} (keep_running)")
    else:
        server = await _start(spec, server_dir(out_dir, phase.label), control, log)
    doc.server.update(server_facts(server, reused))
    doc.save()
    try:
        yield Endpoint(server.url, {})
    finally:
        if phase.server is not None and phase.server.keep_running and not control.stopped:
            await pool.keep(phase.checkpoint, spec, server, log)
        else:
            await _stop(server, spec, log)
            doc.server["server_stop"] = server.state.stop
            doc.save()


async def _start(spec: ServerSpec, run_dir: Path, control: RunControl,
                 log: Log) -> ManagedServer:
    cancel = threading.Event()
    forget = control.on_stop(cancel.set)  # Ctrl-C stops the wait (and the half-started server)
    if control.stopped:
        cancel.set()
    where = f" on {spec.host}" if spec.host else ""
    log(f"starting the server{where} (log: {run_dir / 'server.log'}; ready = /health and "
        f"/v1/models listing {spec.model or 'a model'}, within {spec.ready_timeout_s:g} s)")
    try:
        server = await asyncio.to_thread(start_server, spec, run_dir, cancel=cancel)
    except ServerStartError as exc:
        for line in exc.tail:
            log(f"  | {line}")
        raise
    finally:
        forget()
    log(f"server ready at {server.url} after {server.state.time_to_ready_s} s")
    return server
