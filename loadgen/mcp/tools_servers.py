"""Server tools: ``start_server``, ``server_status``, ``stop_server``, ``server_logs``.

A managed server (:mod:`loadgen.servers`) is a process this machine (or an ssh host)
runs, so every tool here is refused unless ``loadgen mcp`` was started with
``--allow-deploy``, and ``start_server`` only runs a command that begins with one of
the ``--allow-server-command`` prefixes (``vllm``, or ``python -m
vllm.entrypoints.openai.api_server``: compared argument by argument, the program
exactly as given, never by its base name) on ``--allow-server-host`` hosts only.
Servers live in ``WORKDIR/servers/NAME/`` (state file and log); they keep running
when the MCP server exits, and ``loadgen server stop --dir WORKDIR/servers/NAME``
stops them from a shell.
"""

import asyncio
import re
import shlex
import threading
from pathlib import Path
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from ..errors import ConfigError
from ..servers import (
    DEFAULT_PORT,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_STOP_GRACE_S,
    ManagedServer,
    ServerSpec,
    find_server,
)
from ..servers import (
    start_server as start_managed_server,  # the tool has the plain name
)
from .options import ServerOptions
from .toolkit import QUICK_S, bounded

MAX_LOG_LINES = 200
MAX_LOG_LINE_CHARS = 1000
MAX_READY_TIMEOUT_S = 3600.0
SERVER_CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                open_world_hint=False)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# ``api_key='...'``, ``"hf_token": "..."``, ``--api-key=...`` in a log line: the value is masked.
_SECRET_IN_LOG = re.compile(r"((?:api|hf|access)?[_-]?(?:key|token|secret|password)['\"]?"
                            r"\s*[:=]\s*['\"]?)([^'\",\s})]+)", re.IGNORECASE)

Name = Annotated[str, Field(description="The server's name (letters, digits, '.', '_', '-'): "
                                        "its directory under WORKDIR/servers/.")]


class ServerInfo(BaseModel):
    name: str
    status: str = Field(description="starting, ready, stopped, exited or failed")
    alive: bool = Field(description="whether its process runs now")
    url: str
    pid: int | None
    host: str | None
    time_to_ready_s: float | None = Field(description="launch to /health 200 and the model "
                                          "listed by /v1/models")
    command: list[str] = Field(description="as started (secret option values masked)")
    facts: dict[str, Any] = Field(description="from its startup log (vLLM version, KV cache, "
                                  "load times, ...)")
    error: str | None
    log: str = Field(description="the log file (server_logs reads it)")


class ServerList(BaseModel):
    servers: list[ServerInfo]


class ServerLogs(BaseModel):
    name: str
    lines: list[str] = Field(description=f"the log's last lines (at most {MAX_LOG_LINES}, "
                             "secret-looking values masked)")


def refuse_servers(options: ServerOptions, what: str) -> None:
    """The ``--allow-deploy`` rule for tools that start or stop processes."""
    if not options.allow_deploy:
        raise ToolError(f"refused: {what} starts or stops server processes, and this server "
                        "was started without --allow-deploy (restart it with `loadgen mcp "
                        "--allow-deploy --allow-server-command vllm` to allow that)")


def check_allowed(options: ServerOptions, argv: tuple[str, ...], host: str | None) -> None:
    """Refuse a command no ``--allow-server-command`` prefix allows, or a host not allowed."""
    prefixes = [tuple(shlex.split(text)) for text in options.allowed_server_commands]
    if not any(prefix and argv[:len(prefix)] == prefix for prefix in prefixes):
        allowed = ", ".join(repr(p) for p in options.allowed_server_commands) or "none"
        raise ToolError(f"refused: the command {shlex.join(argv[:4])!r}... is not allowed on "
                        f"this server (allowed command prefixes: {allowed}; add one with "
                        "loadgen mcp --allow-server-command)")
    if host is not None and host not in options.allowed_server_hosts:
        raise ToolError(f"refused: host {host!r} is not allowed on this server (add it with "
                        "loadgen mcp --allow-server-host)")


def check_scenario_servers(options: ServerOptions, phases: list) -> None:
    """A scenario whose phases start servers: the same rules as ``start_server``."""
    refuse_servers(options, "this scenario (its phases start servers)")
    for phase in phases:
        if phase.server is not None:
            check_allowed(options, tuple(phase.server.command), phase.server.host)


def mask_log_line(line: str) -> str:
    return _SECRET_IN_LOG.sub(r"\1***", line)[:MAX_LOG_LINE_CHARS]


def _info(name: str, server: ManagedServer) -> ServerInfo:
    state = server.state
    return ServerInfo(name=name, status=state.status, alive=server.alive(), url=state.url,
                      pid=state.pid, host=state.host, time_to_ready_s=state.time_to_ready_s,
                      command=state.command, facts=state.facts, error=state.error,
                      log=str(server.log_file))


def register(server: MCPServer, options: ServerOptions) -> None:
    servers_dir = options.workdir / "servers"

    def run_dir(name: str) -> Path:
        if not _NAME.match(name):
            raise ConfigError(f"server name {name!r}: use letters, digits, '.', '_' or '-' "
                              "(at most 64)")
        return servers_dir / name

    @server.tool(annotations=SERVER_CHANGE)
    @bounded(lambda kwargs: (kwargs.get("ready_timeout_s") or DEFAULT_READY_TIMEOUT_S)
             + 2 * (kwargs.get("stop_grace_s") or DEFAULT_STOP_GRACE_S) + QUICK_S)
    async def start_server(
        name: Name,
        command: Annotated[list[str], Field(min_length=1, description="The program and its "
                           "arguments; {port} and {model} are filled in, e.g. [\"vllm\", "
                           "\"serve\", \"{model}\", \"--port\", \"{port}\"].")],
        model: Annotated[str | None, Field(description="The model /v1/models must list "
                         "before it counts as ready; fills {model}.")] = None,
        port: Annotated[int, Field(ge=0, lt=65536, description="Fills {port}; 0 picks a "
                        "free port (this machine only).")] = DEFAULT_PORT,
        host: Annotated[str | None, Field(description="user@vm: start it there over ssh "
                        "(an --allow-server-host of this server).")] = None,
        env: Annotated[dict[str, str] | None, Field(description="Extra environment for the "
                       "server (never written to disk).")] = None,
        ready_timeout_s: Annotated[float, Field(gt=0, le=MAX_READY_TIMEOUT_S, description="Give "
                                   "up (and stop it) when not ready after this long.")]
        = DEFAULT_READY_TIMEOUT_S,
        stop_grace_s: Annotated[float, Field(gt=0, le=600, description="SIGTERM, then SIGKILL "
                                "after this long, when a start fails.")] = DEFAULT_STOP_GRACE_S,
    ) -> ServerInfo:
        """Start an OpenAI-compatible server (vllm serve, ...) and wait until it is ready
        (/health 200, the model listed); it keeps running until stop_server. The target
        for start_run is its url. Needs --allow-deploy and an allowed command."""
        refuse_servers(options, "start_server")
        spec = ServerSpec(tuple(command), model=model, port=port, host=host, env=env or {},
                          ready_timeout_s=ready_timeout_s, stop_grace_s=stop_grace_s)
        check_allowed(options, tuple(spec.argv()), host)  # as it would run, {model} filled
        cancel = threading.Event()
        try:
            managed = await asyncio.to_thread(start_managed_server, spec, run_dir(name),
                                              cancel=cancel)
        except BaseException:
            cancel.set()  # the call was cancelled or timed out: the thread stops the server
            raise
        return _info(name, managed)

    @server.tool(annotations=SERVER_CHANGE)
    @bounded(QUICK_S)
    async def server_status(
        name: Annotated[str | None, Field(description="A server's name; none: every server "
                        "started from this work directory.")] = None,
    ) -> ServerList:
        """Whether managed servers run: status, url, time to ready, facts from their log."""
        refuse_servers(options, "server_status")
        names = [name] if name else sorted(p.parent.name for p in servers_dir.glob("*/server.json"))
        found = [_info(n, await asyncio.to_thread(find_server, run_dir(n))) for n in names]
        return ServerList(servers=found)

    @server.tool(annotations=SERVER_CHANGE)
    @bounded(lambda kwargs: (kwargs.get("stop_grace_s") or DEFAULT_STOP_GRACE_S) + QUICK_S)
    async def stop_server(
        name: Name,
        stop_grace_s: Annotated[float, Field(gt=0, le=600, description="SIGTERM, then SIGKILL "
                                "after this long.")] = DEFAULT_STOP_GRACE_S,
    ) -> ServerInfo:
        """Stop a managed server (its whole process group). Idempotent."""
        refuse_servers(options, "stop_server")
        managed = await asyncio.to_thread(find_server, run_dir(name))
        await asyncio.to_thread(managed.stop, stop_grace_s)
        return _info(name, managed)

    @server.tool(annotations=SERVER_CHANGE)
    @bounded(QUICK_S)
    async def server_logs(
        name: Name,
        lines: Annotated[int, Field(ge=1, le=MAX_LOG_LINES, description="How many of the "
                         "log's last lines.")] = 50,
    ) -> ServerLogs:
        """The last lines of a managed server's log (secret-looking values masked)."""
        refuse_servers(options, "server_logs")
        managed = await asyncio.to_thread(find_server, run_dir(name))
        tail = await asyncio.to_thread(managed.tail, lines)
        return ServerLogs(name=name, lines=[mask_log_line(line) for line in tail])
