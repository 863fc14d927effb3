"""The ``loadgen`` command line: a thin layer over :mod:`loadgen.api`.

Every user-facing failure is a :class:`~loadgen.errors.LoadgenError`, printed as
one ``Error: ...`` line with a non-zero exit; no tracebacks for bad input.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import cloup
import orjson

from .._version import __version__
from ..api import sweep as api_sweep
from ..engine import RunControl
from ..errors import RunStopped
from ..load import waves_warning
from ..knee import format_knee
from ..progress import PlainProgress, error_kinds, make_progress, run_header
from ..results import Results
from ..runconfig import RunConfig, build_run
from ..saturation import level_plan
from ..timefmt import stamp
from .common import LoadgenGroup, StopSignals, UserError, run_async
from .options import LEVELS, ONE_LEVEL, SWEEP_CONCURRENCY, run_options_decorator, values_from


def run_config_from(kw: dict[str, Any], command: str) -> RunConfig:
    """The one :class:`RunConfig` the command line describes: click's keywords (the run
    options are popped from ``kw``, the CLI's own --out and --quiet stay) through the same
    builder as every front door (:func:`loadgen.runconfig.build_run`)."""
    values = values_from(kw, command)
    if command == LEVELS and not any(values.get(key) for key in
                                     ("concurrency", "rate", "trace", "profile")):
        values["concurrency"] = SWEEP_CONCURRENCY  # sweep's own default levels
    return build_run(values)


# Exit codes (README, "Exit codes").
EXIT_ALL_FAILED = 3  # the run finished but not one request succeeded
EXIT_FALLBACK_FILE = 4  # results written, but not to --out (it could not be written),
# or an export (--save-requests, --hdr-log) failed mid-run
EXIT_WORKER_DIED = 5  # a worker process/actor died: the results are partial


async def _run_command(config: RunConfig, kw: dict[str, Any]) -> None:
    stop = config.stop
    levels = level_plan(config).total
    to_stdout = kw["out"] == "-"  # the results JSON goes to stdout, everything else to stderr
    out = None if to_stdout else kw["out"] or f"loadgen-{stamp()}.json"
    quiet = kw["quiet"]

    def echo(text: str) -> None:
        if not quiet:
            click.echo(text, err=to_stdout)

    def diagnostic(text: str) -> None:
        click.echo(text, err=True)

    control = RunControl()
    signals = StopSignals(control, stopping="{signal}: stopping, writing what was measured",
                          again="already stopping: writing what was measured "
                                "(Ctrl-C once more aborts without writing)").install()
    progress = (PlainProgress(levels, diagnostic, level_lines=False) if quiet
                else make_progress(levels, stop, sys.stderr, diagnostic))

    def started(result: Results) -> None:
        echo(run_header(result))
        progress.start()

    def level_done(level: Any) -> None:
        progress.level_done(level)
        warning = waves_warning(level.load, level.metrics.counts.requests)
        if warning:
            diagnostic(f"warning: {warning}")

    try:
        result = await api_sweep(config=config, out=out, control=control, on_start=started,
                                 on_progress=progress.update, on_level=level_done,
                                 log=diagnostic)
    except RunStopped as exc:
        raise UserError(str(exc), signals.exit_code) from None
    finally:
        progress.close()
    data = result.to_dict()
    from ..report.table import format_table
    from ..report.workload import describe_workload

    echo(format_table(data["levels"], workload=describe_workload(data)))
    if any(level.get("cloudwatch") for level in data["levels"]):  # sagemaker:// runs
        from ..report.cloudwatch import cloudwatch_lines

        for line in cloudwatch_lines(data["levels"]):
            echo(line)
    if (data.get("profile") or {}).get("name") == "slo-search":
        echo(format_knee(data["profile"]))
    if data["target"].get("stream") is False:
        echo("non-streaming: TTFT is the full latency (the whole body arrives at once)")
    sys.exit(_report_outcome(result, data, out, to_stdout, signals))


def _report_outcome(result: Results, data: dict, out: str | None, to_stdout: bool,
                    signals: StopSignals) -> int:
    """Say where the results are and what happened; return the exit code."""
    if to_stdout:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        where = "stdout"
    elif result.write_error:
        where = str(result.path)
        click.echo(f"warning: {result.write_error}; the results were written to {where} "
                   "instead", err=True)
    else:
        where = str(out)
    failed = sum(lv["requests"]["failed"] for lv in data["levels"])
    completed = sum(lv["requests"]["completed"] for lv in data["levels"])
    if result.partial:
        dead = (data.get("workers") or {}).get("dead")
        if dead and signals.first is None:  # no signal stopped it: a worker died
            click.echo(f"results: {where} (partial: {len(dead)} worker(s) died)", err=True)
            return EXIT_WORKER_DIED
        click.echo(f"results: {where} (partial: stopped early)", err=True)
        return signals.exit_code
    click.echo(f"results: {where}", err=True)
    if completed == 0 and failed:
        first = _first_error_message(data)
        click.echo(f"Error: all {failed} requests failed "
                   f"({error_kinds(_all_errors(data))})"
                   + (f"; the server said: {first}" if first else ""), err=True)
        return EXIT_ALL_FAILED
    failed_exports = any(status != "ok" for status in data.get("exports", {}).values())
    return EXIT_FALLBACK_FILE if result.write_error or failed_exports else 0


def _first_error_message(data: dict) -> str | None:
    """The first error message kept (the level's first error type's first message)."""
    for lv in data["levels"]:
        for messages in lv["requests"].get("error_messages", {}).values():
            if messages:
                first = " ".join(str(messages[0]).split())  # one line
                return first if len(first) <= 300 else first[:299] + "…"
    return None


def _all_errors(data: dict) -> dict[str, int]:
    total: dict[str, int] = {}
    for lv in data["levels"]:
        for kind, count in lv["requests"]["errors"].items():
            total[kind] = total.get(kind, 0) + count
    return total


# Commands that live in their own modules, imported when used: name -> (where, short help).
LAZY_COMMANDS = {
    "compare": ("loadgen.cli.report:compare", "Compare two results files: fidelity, B/A ratios."),
    "endpoint": ("loadgen.cli.endpoint:endpoint", "Deploy, inspect and delete SageMaker "
                                                  "endpoints."),
    "facts": ("loadgen.cli.endpoint:facts", "Deployment facts from vLLM (load time, KV "
                                            "cache)."),
    "mcp": ("loadgen.cli.mcp:mcp_command", "Serve loadgen's tools to an MCP client "
                                               "(assistants, agents)."),
    "mock-server": ("loadgen.cli.simulator:mock_server_command", "Serve the built-in vLLM "
                                                                 "simulator."),
    "report": ("loadgen.cli.report:report", "Reports from a results file or a scenario "
                                            "directory."),
    "scenario": ("loadgen.cli.scenario:scenario", "Comparison studies (A-B-A) from a "
                                                  "scenario file."),
    "server": ("loadgen.cli.server:server", "Start, inspect and stop a vLLM (or any "
                                            "OpenAI-compatible) server."),
}


@click.group(cls=LoadgenGroup, lazy=LAZY_COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"],
                               # every command's help shows its options' defaults
                               "show_default": True})
@click.version_option(__version__, prog_name="loadgen")
def cli() -> None:
    """Load generator for LLM inference endpoints (vLLM HTTP, Amazon SageMaker)."""


@cli.command(cls=cloup.Command)
@run_options_decorator(ONE_LEVEL)
@run_async
async def run(**kw: Any) -> None:
    """Measure one load level."""
    await _run_command(run_config_from(kw, ONE_LEVEL), kw)


@cli.command(cls=cloup.Command)
@run_options_decorator(LEVELS)
@run_async
async def sweep(**kw: Any) -> None:
    """Measure several load levels, each separately, into one results file."""
    await _run_command(run_config_from(kw, LEVELS), kw)


def main() -> None:
    cli(prog_name="loadgen")


if __name__ == "__main__":
    main()
