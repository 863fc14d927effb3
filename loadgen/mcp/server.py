"""The MCP server: tools, resources, the run manager's lifetime, and the transports.

:func:`build_server` makes the server (tests talk to it with the SDK's in-memory
client); :func:`serve` runs it over stdio or streamable HTTP.
"""

import contextlib
import json
from typing import Any, AsyncIterator

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from .. import __version__
from ..errors import LoadgenError, one_line
from ..report.files import read_json, report_directory
from . import tools_aws, tools_runs, tools_servers, tools_study
from .arguments import check_arguments
from .confine import check_allowances, results_directory
from .http import serve_http
from .options import ServerOptions, check_http_access
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


def _argument_checks(server: MCPServer, options: ServerOptions) -> Any:
    """Middleware: every ``tools/call``'s arguments checked against the tool's input
    schema (:func:`.arguments.check_arguments`) and the server's allowances
    (:func:`.confine.check_allowances`) before the SDK sees them; a problem is a one-line
    tool error. Any other tool error that spans lines is folded into one."""
    schemas: dict[str, dict] = {}

    async def check(ctx: Any, call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        if ctx.method != "tools/call" or not isinstance(params.get("arguments") or {}, dict):
            return await call_next(ctx)
        if not schemas:
            schemas.update({tool.name: tool.input_schema for tool in await server.list_tools()})
        name = params.get("name")
        problem = (check_arguments(name, schemas[name], params.get("arguments") or {})
                   if name in schemas else None)
        try:
            if not problem:
                check_allowances(options, params.get("arguments") or {})
        except LoadgenError as exc:
            problem = f"{name}: {exc}"
        if problem:
            return _tool_error(problem)
        result = await call_next(ctx)
        if isinstance(result, CallToolResult) and result.is_error and len(result.content) == 1:
            text = getattr(result.content[0], "text", "")
            if "\n" in text:
                return _tool_error(one_line(text, 1000))
        return result

    return check


def _tool_error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


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
            kind = manager.record(run_id)["kind"]
            name = RESULTS_FILE if kind == LOAD else "summary.json"
            return json.dumps(read_json(manager.run_file(run_id, name)), indent=2)
        except LoadgenError as exc:
            raise ResourceError(str(exc)) from None

    @server.resource("loadgen://runs/{run_id}/report", mime_type="text/markdown",
                     description="A run's Markdown report (built from its results).")
    def report(run_id: str) -> str:
        try:
            directory = results_directory(manager.options, manager.directory_of(run_id), "run")
            report_directory(directory, formats=("md",))
            return manager.run_file(run_id, "report.md").read_text(encoding="utf-8")
        except LoadgenError as exc:
            raise ResourceError(str(exc)) from None


def build_server(options: ServerOptions) -> MCPServer:
    """The loadgen MCP server; its run manager lives as long as the server runs."""
    options = options.resolved()
    manager = RunManager(options)

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict]:
        async with manager.running():
            yield {}

    server = MCPServer("loadgen", version=__version__, instructions=INSTRUCTIONS,
                       lifespan=lifespan, middleware=[_scrub_secrets], log_level="WARNING")
    server.middleware.append(_argument_checks(server, options))  # inside the scrubbing
    tools_runs.register(server, manager)
    tools_study.register(server, manager)
    tools_aws.register(server, options)
    tools_servers.register(server, options)
    _resources(server, manager)
    return server


def serve(options: ServerOptions, http: tuple[str, int] | None = None,
          token: str | None = None) -> None:
    """Run until the client goes away (stdio) or the process is stopped (HTTP: Host and
    Origin checked whatever the bind address; ``token`` required off loopback)."""
    server = build_server(options)
    if http is None:
        server.run("stdio")
    else:
        host, port = http
        check_http_access(host, token)
        serve_http(server, host, port, token)
