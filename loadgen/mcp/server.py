"""The MCP server: tools, resources, the run manager's lifetime, and the transports.

:func:`build_server` makes the server (tests talk to it with the SDK's in-memory
client); :func:`serve` runs it over stdio or streamable HTTP.
"""

import contextlib
import dataclasses
import json
from typing import Any, AsyncIterator

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from .. import __version__
from ..errors import LoadgenError
from ..report.files import read_json, report_directory
from . import tools_aws, tools_runs, tools_servers, tools_study
from .options import ServerOptions
from .redact import scrub, secret_values
from .runs import LOAD, RESULTS_FILE, RunManager

INSTRUCTIONS = """\
loadgen measures LLM inference endpoints (vLLM OpenAI-compatible servers, Amazon SageMaker).
start_run and run_scenario run in the background: poll run_status (wait_s waits, with
progress), stop with cancel_run, read with get_results, compare two runs with compare_runs.
Targets: an http(s):// URL, sagemaker://ENDPOINT, or 'simulator' (built-in, no GPU).
deploy_endpoint/delete_endpoint need a server started with --allow-deploy.
start_server/server_status/stop_server/server_logs manage vLLM (or other OpenAI-compatible)
server processes: they need --allow-deploy, and start_server an --allow-server-command.
"""


async def _scrub_secrets(ctx: Any, call_next: Any) -> Any:
    """Middleware: mask credentials in every result and error this server sends."""
    secrets = secret_values()
    try:
        result = await call_next(ctx)
    except MCPError as exc:
        raise MCPError(exc.code, scrub(exc.message, secrets), scrub(exc.data, secrets)) from None
    if isinstance(result, BaseModel):
        result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return scrub(result, secrets)


def _resources(server: MCPServer, manager: RunManager) -> None:
    """``loadgen://runs`` and each run's ``results`` and ``report``."""

    @server.resource("loadgen://runs", mime_type="application/json",
                     description="Every run in the work directory, newest first.")
    def runs() -> str:
        return json.dumps(manager.list_records(), indent=2)

    @server.resource("loadgen://runs/{run_id}/results", mime_type="application/json",
                     description="A run's results file (a scenario run: its summary.json).")
    def results(run_id: str) -> str:
        try:
            directory = manager.directory_of(run_id)
            kind = manager.record(run_id)["kind"]
            name = RESULTS_FILE if kind == LOAD else "summary.json"
            return json.dumps(read_json(directory / name), indent=2)
        except LoadgenError as exc:
            raise ResourceError(str(exc)) from None

    @server.resource("loadgen://runs/{run_id}/report", mime_type="text/markdown",
                     description="A run's Markdown report (built from its results).")
    def report(run_id: str) -> str:
        try:
            directory = manager.directory_of(run_id)
            report_directory(directory, formats=("md",))
        except LoadgenError as exc:
            raise ResourceError(str(exc)) from None
        return (directory / "report.md").read_text(encoding="utf-8")


def build_server(options: ServerOptions) -> MCPServer:
    """The loadgen MCP server; its run manager lives as long as the server runs."""
    options = dataclasses.replace(options, workdir=options.workdir.resolve())
    manager = RunManager(options)

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict]:
        async with manager.running():
            yield {}

    server = MCPServer("loadgen", version=__version__, instructions=INSTRUCTIONS,
                       lifespan=lifespan, middleware=[_scrub_secrets], log_level="WARNING")
    tools_runs.register(server, manager)
    tools_study.register(server, manager)
    tools_aws.register(server, options)
    tools_servers.register(server, options)
    _resources(server, manager)
    return server


def serve(options: ServerOptions, http: tuple[str, int] | None = None) -> None:
    """Run until the client goes away (stdio) or the process is stopped (HTTP)."""
    server = build_server(options)
    if http is None:
        server.run("stdio")
    else:
        host, port = http
        server.run("streamable-http", host=host, port=port)
