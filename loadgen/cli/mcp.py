"""``loadgen mcp``: the click command. The MCP SDK is imported only when it runs, so the
rest of the CLI works without the ``mcp`` extra."""

from __future__ import annotations

from pathlib import Path

import click

from ..mcp.options import (
    DEFAULT_WORKDIR,
    ServerOptions,
    check_http_access,
    parse_http_address,
)
from ..simulator.runners import is_loopback
from .common import UserError, one_line_errors

INSTALL_HINT = "loadgen mcp needs the MCP SDK: pip install 'loadgen[mcp]'"


@click.command("mcp")
@click.option("--http", "http_address", metavar="[HOST:]PORT",
              help="Serve streamable HTTP on HOST:PORT (host default 127.0.0.1) at /mcp "
                   "instead of stdio.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_WORKDIR, show_default=True,
              help="Where runs, results and deployment records are kept.")
@click.option("--allow-deploy", is_flag=True,
              help="Allow tools that create or delete AWS resources (deploy_endpoint, "
                   "delete_endpoint, scenarios that deploy) or server processes "
                   "(start_server, stop_server, ...).")
@click.option("--allow-server-command", "server_commands", multiple=True, metavar="PREFIX",
              help="With --allow-deploy: start_server may run commands that begin with this "
                   "(e.g. vllm, or 'python -m vllm.entrypoints.openai.api_server'). Repeatable.")
@click.option("--allow-server-host", "server_hosts", multiple=True, metavar="USER@VM",
              help="start_server may start servers on this ssh host. Repeatable.")
@click.option("--max-concurrency", type=int, default=ServerOptions.max_concurrency,
              metavar="STREAMS", help="Highest concurrency (and open-loop in-flight cap) a "
                                      "run may use.")
@click.option("--max-duration", type=float, default=ServerOptions.max_duration_s,
              show_default=True, metavar="S",
              help="A run is stopped after this many seconds (its results are kept).")
@click.option("--max-active-runs", type=int, default=ServerOptions.max_active_runs,
              metavar="RUNS", help="Runs at once.")
@click.option("--http-token", envvar="LOADGEN_MCP_TOKEN", metavar="TOKEN",
              help="With --http: every request must carry Authorization: Bearer TOKEN "
                   "(required off loopback). Prefer the LOADGEN_MCP_TOKEN variable: a "
                   "command line is visible to other users.")
@click.option("--allow-read", multiple=True, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="A directory whose files tools may read (scenarios, results, logs), "
                   "besides --workdir; repeatable. Any other path is refused.")
@click.option("--allow-env", multiple=True, metavar="NAME",
              help="An environment variable a run's api_key_env may name (its value is "
                   "sent to the run's target); repeatable. Default: none, no API key.")
@click.option("--allow-target", multiple=True, metavar="PATTERN",
              help="Runs may go only to targets matching a pattern, e.g. "
                   "'http://10.0.0.5:*', 'sagemaker://bench-*', simulator; repeatable. "
                   "Default: any target.")
@click.option("--region", help="Default AWS region for the endpoint tools.")
@click.option("--aws-endpoint-url", metavar="URL",
              help="Default AWS API endpoint for the endpoint tools (e.g. a local emulator).")
@one_line_errors
def mcp_command(http_address: str | None, workdir: Path, allow_deploy: bool,
                server_commands: tuple[str, ...], server_hosts: tuple[str, ...],
                max_concurrency: int, max_duration: float, max_active_runs: int,
                http_token: str | None, allow_read: tuple[Path, ...],
                allow_env: tuple[str, ...], allow_target: tuple[str, ...],
                region: str | None, aws_endpoint_url: str | None) -> None:
    """Serve loadgen's tools to an MCP client (Claude Desktop, VS Code, agents) over stdio."""
    options = ServerOptions(workdir=workdir, allow_deploy=allow_deploy,
                            allowed_server_commands=server_commands,
                            allowed_server_hosts=server_hosts,
                            max_concurrency=max_concurrency, max_duration_s=max_duration,
                            max_active_runs=max_active_runs, region=region,
                            aws_endpoint_url=aws_endpoint_url, allow_read=allow_read,
                            allow_env=allow_env, allow_target=allow_target)
    http = parse_http_address(http_address) if http_address else None
    if http is not None:
        check_http_access(http[0], http_token)
    try:
        from ..mcp.server import serve
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "mcp":
            raise
        raise UserError(INSTALL_HINT) from None
    if http is not None:
        where = f"http://{http[0]}:{http[1]}/mcp"
        warning = "" if is_loopback(http[0]) else (
            " (not a loopback address: anyone who can reach it and has the token can send "
            "load" + (" and deploy endpoints" if allow_deploy else "") + ")")
        click.echo(f"loadgen mcp: serving {where}{warning}", err=True)
    serve(options, http, http_token)
