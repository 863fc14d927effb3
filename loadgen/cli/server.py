"""``loadgen server start|status|logs|stop``: a thin layer over :mod:`loadgen.servers`.

``start`` returns once the server is ready and leaves it running; ``status``, ``logs``
and ``stop`` find it again from ``--dir`` (its state file), from any later process.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import cloup

from ..errors import ConfigError
from ..servers import (
    DEFAULT_PORT,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_STOP_GRACE_S,
    ServerSpec,
    ServerStartError,
    find_server,
    split_command,
    start_server,
)
from ..servers.spec import default_api_key_env
from ..servers.state import READY, STARTING, ServerState
from ..vllm.facts import ServerFacts
from ..vllm.facts_table import format_facts_table
from .common import UserError, one_line_errors

DEFAULT_DIR = "loadgen-server"
MAX_LOG_LINES = 10_000
EXIT_NOT_RUNNING = 3  # ``status``: the server is not running (as ``systemctl status``)

DIR_OPTION = click.option("--dir", "run_dir", type=click.Path(file_okay=False, path_type=Path),
                          default=DEFAULT_DIR, help="The server's run directory: its state "
                          "file (server.json) and log (server.log).")
GRACE_OPTION = click.option("--stop-grace", type=float, default=DEFAULT_STOP_GRACE_S,
                            metavar="S", help="Seconds between SIGTERM and SIGKILL when "
                            "stopping it.")


@click.group("server")
def server() -> None:
    """Start, inspect and stop an OpenAI-compatible server (vllm serve, llama-server, ...)."""


def parse_env(items: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in items:
        name, has_value, value = item.partition("=")
        if not has_value or not name:
            raise ConfigError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    return env


@server.command(cls=cloup.Command, context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@DIR_OPTION
@click.option("--model", help="The model /v1/models must list before the server counts as "
                              "ready; also fills {model} in the command.")
@click.option("--port", type=int, default=DEFAULT_PORT, metavar="PORT", help="Fills {port} in the command; "
              "0 picks a free port (this machine only).")
@click.option("--host", metavar="USER@VM", help="Start it on this host over ssh (batch mode: "
              "keys from your agent or ~/.ssh/config).")
@click.option("--env", "env_items", multiple=True, metavar="NAME=VALUE",
              help="Extra environment for the server. Repeatable.")
@click.option("--ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT_S, metavar="S",
              help="Give up (and stop it) when it is not ready after this many seconds.")
@GRACE_OPTION
@click.option("--api-key-env", default=default_api_key_env(), metavar="NAME",
              help="Environment variable whose value is sent as the Bearer key to "
                   "/v1/models (only when set).")
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@one_line_errors
def start(command: tuple[str, ...], run_dir: Path, model: str | None, port: int,
          host: str | None, env_items: tuple[str, ...], ready_timeout: float, stop_grace: float,
          api_key_env: str, as_json: bool) -> None:
    """Start COMMAND (after --) and wait until it is ready; it keeps running after this returns.

    \b
    {port} and {model} in COMMAND are replaced, e.g.
      loadgen server start --model Qwen/Qwen3-0.6B -- vllm serve {model} --port {port}
      loadgen server start --model /models/tiny -- \\
          python -m vllm.entrypoints.openai.api_server --model {model} --port {port}
    Ready means GET /health answers 200 and GET /v1/models lists --model.
    """
    argv = split_command(command[0]) if len(command) == 1 else command
    spec = ServerSpec(argv, model=model, port=port, host=host, env=parse_env(env_items),
                      ready_timeout_s=ready_timeout, stop_grace_s=stop_grace,
                      api_key_env=api_key_env)
    where = f" on {host}" if host else ""
    click.echo(f"starting {' '.join(argv)}{where} (log: {run_dir / 'server.log'})", err=True)
    try:
        managed = start_server(spec, run_dir)
    except ServerStartError as exc:
        for line in exc.tail:
            click.echo(f"  | {line}", err=True)
        raise
    except KeyboardInterrupt:
        raise UserError("interrupted while the server was starting; it was stopped", 130) \
            from None
    _print_state(managed.state, True, as_json)


def _print_state(state: ServerState, alive: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({**state.to_json(), "alive": alive}, indent=2))
        return
    where = f" on {state.host}" if state.host else ""
    if alive and state.status == READY:
        click.echo(f"running at {state.url}{where}: ready after {state.time_to_ready_s} s "
                   f"(pid {state.pid})")
    elif alive and state.status == STARTING:
        click.echo(f"running at {state.url}{where} (pid {state.pid}), never seen ready: the "
                   "loadgen that started it stopped waiting (or is still waiting)")
    elif alive:
        click.echo(f"running at {state.url}{where} (pid {state.pid}), state file says "
                   f"{state.status}")
    else:
        how = f" by {state.stop['signal']} in {state.stop['seconds']} s" if state.stop else ""
        why = f": {state.error}" if state.error else ""
        click.echo(f"not running ({state.status}{how}{why})")
    click.echo(f"command: {' '.join(state.command)}")
    if state.facts:
        click.echo(format_facts_table(ServerFacts(**state.facts)))


@server.command(cls=cloup.Command)
@DIR_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
@one_line_errors
def status(run_dir: Path, as_json: bool) -> None:
    """Whether the server in --dir runs (exit 0) or not (exit 3)."""
    managed = find_server(run_dir)
    alive = managed.alive()
    _print_state(managed.state, alive, as_json)
    if not alive:
        raise SystemExit(EXIT_NOT_RUNNING)


@server.command(cls=cloup.Command)
@DIR_OPTION
@click.option("--lines", type=click.IntRange(1, MAX_LOG_LINES), default=50, metavar="LINES",
              help="How many of the log's last lines.")
@one_line_errors
def logs(run_dir: Path, lines: int) -> None:
    """The last lines of the server's log (read on the host for --host servers)."""
    for line in find_server(run_dir).tail(lines):
        click.echo(line)


@server.command(cls=cloup.Command)
@DIR_OPTION
@GRACE_OPTION
@one_line_errors
def stop(run_dir: Path, stop_grace: float) -> None:
    """Stop the server in --dir: SIGTERM to its process group, SIGKILL after --stop-grace."""
    if not stop_grace > 0:
        raise ConfigError(f"--stop-grace must be > 0 seconds (got {stop_grace})")
    managed = find_server(run_dir)
    if not managed.alive():
        managed.stop(stop_grace)  # records that it is gone
        click.echo(f"not running ({managed.state.status}); nothing to stop")
        return
    state = managed.stop(stop_grace)
    click.echo(f"stopped (pid {state.pid}) by {state.stop['signal']} in "
               f"{state.stop['seconds']} s")
