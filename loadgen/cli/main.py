"""The ``loadgen`` command line: a thin layer over :mod:`loadgen.api`.

Every user-facing failure is a :class:`~loadgen.errors.LoadgenError`, printed as
one ``Error: ...`` line with a non-zero exit; no tracebacks for bad input.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Sequence

import click
import cloup
import orjson

from .. import __version__
from ..api import SIMULATOR
from ..api import sweep as api_sweep
from ..config import RequestOptions, Timeouts
from ..engine import RunControl
from ..errors import ConfigError, RunStopped
from ..load import (
    ArrivalRate,
    ConstantConcurrency,
    Load,
    StopRule,
    waves_warning,
)
from ..progress import PlainProgress, make_progress, run_header
from ..knee import format_knee
from ..results import RunResult, error_kinds, format_table
from ..results_types import Results
from ..runconfig import RunConfig, TargetConfig, parse_workers
from ..levelplan import profile_plan
from ..workload.settings import WorkloadSettings
from .common import LoadgenGroup, StopSignals, UserError, run_async
from .options import run_options
from .workload import check_level_options, workload_from_options


def _numbers(text: str | None, kind: Callable[[str], Any], option: str) -> list[Any]:
    if text is None:
        return []
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option} takes a comma-separated list of numbers (got {text!r})") from None
    if not values:
        raise ConfigError(f"{option} needs at least one value")
    return values


def build_loads(concurrency: str | None, rate: str | None, arrival: str,
                max_in_flight: int | None, max_rate: float | None, seed: int) -> list[Load]:
    if concurrency and rate:
        raise ConfigError("use either --concurrency (closed loop) or --rate (open loop), not both")
    if rate:
        if max_rate is not None:
            raise ConfigError("--max-rate caps closed-loop runs; with --rate the rate is the schedule")
        return [ArrivalRate(r, arrival, max_in_flight, seed) for r in _numbers(rate, float, "--rate")]
    if max_in_flight is not None:
        raise ConfigError("--max-in-flight applies to --rate runs; --concurrency is already a cap")
    return [ConstantConcurrency(c, max_rate)
            for c in _numbers(concurrency or "1", int, "--concurrency")]


def run_config_from(loads: Sequence[Load], kw: dict[str, Any],
                    workload: WorkloadSettings | None = None) -> RunConfig:
    """The one :class:`RunConfig` the command line describes (no --requests or --duration:
    the StopRule's default request count for each level). ``workload``: already read
    from ``kw`` (None: read it here)."""
    workload = workload if workload is not None else workload_from_options(kw)
    n_requests, duration = kw["n_requests"], kw["duration"]
    options = RequestOptions(
        api=kw["api"], model=kw["model"], stream=kw["stream"], ignore_eos=kw["ignore_eos"],
        continuous_usage=kw["continuous_usage"], api_key_env=kw["api_key_env"],
        timeouts=Timeouts(kw["connect_timeout"], kw["timeout"], kw["idle_timeout"]),
        transport=kw["transport"])
    target = TargetConfig(kw["target"], **{name: kw[name] for name in TargetConfig.__dataclass_fields__
                                           if name != "url"})
    return RunConfig(loads=tuple(loads),
                     stop=StopRule(n_requests, duration, kw["warmup"], kw["graceful_stop"],
                                   ramp_up_s=kw["ramp_up"]),
                     target=target, options=options, workload=workload,
                     server_metrics_interval_s=kw["server_metrics_interval"] or None,
                     workers=parse_workers(kw["workers"]), ray=kw["ray"])


# Exit codes (README, "Exit codes").
EXIT_ALL_FAILED = 3  # the run finished but not one request succeeded
EXIT_FALLBACK_FILE = 4  # results written, but not to --out (it could not be written),
# or an export (--save-requests, --hdr-log) failed mid-run
EXIT_WORKER_DIED = 5  # a worker process/actor died: the results are partial


async def _run_command(loads: Sequence[Load], kw: dict[str, Any]) -> None:
    workload = workload_from_options(kw)
    if workload.trace:
        loads = [workload.trace_load()]
    plan = profile_plan(workload, loads)  # a profile picks each level as the run goes
    config = run_config_from(plan.bounds() if plan else loads, kw, workload)
    if workload.profile == "saturation" and (config.worker_count() > 1 or config.ray):
        raise ConfigError("--profile saturation runs in one process only: drop "
                          "--workers/--ray (or use --workers 1)")
    stop = config.stop
    levels = plan.planned if plan else len(loads)
    to_stdout = kw["out"] == "-"  # the results JSON goes to stdout, everything else to stderr
    out = None if to_stdout else kw["out"] or time.strftime("loadgen-%Y%m%d-%H%M%S.json")
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

    def started(result: RunResult) -> None:
        echo(run_header(result))
        progress.start()

    def level_done(level: Any) -> None:
        progress.level_done(level)
        warning = waves_warning(level.load, level.metrics.counts.requests)
        if warning:
            diagnostic(f"warning: {warning}")

    try:
        if plan is not None:  # levels chosen as the run goes: sweep's keywords
            result = await api_sweep(config.target.url or SIMULATOR, loads=plan, stop=stop,
                                     options=config.options, workload=workload, out=out,
                                     control=control, on_start=started,
                                     on_progress=progress.update, on_level=level_done,
                                     server_metrics_interval_s=config.server_metrics_interval_s,
                                     workers=config.workers, ray=config.ray, log=diagnostic,
                                     **config.target.sagemaker_options())
        else:
            result = await api_sweep(config=config, out=out, control=control,
                                     on_start=started, on_progress=progress.update,
                                     on_level=level_done, log=diagnostic)
    except RunStopped as exc:
        raise UserError(str(exc), signals.exit_code) from None
    finally:
        progress.close()
    data = result.to_dict()
    echo(format_table(data["levels"]))
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
        click.echo(f"Error: all {failed} requests failed "
                   f"({error_kinds(_all_errors(data))}); see requests.error_messages "
                   "in the results", err=True)
        return EXIT_ALL_FAILED
    failed_exports = any(status != "ok" for status in data.get("exports", {}).values())
    return EXIT_FALLBACK_FILE if result.write_error or failed_exports else 0


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
@run_options(click.option("--concurrency", metavar="STREAMS", show_default="1",
                          help="Closed loop: concurrent streams."))
@run_async
async def run(concurrency: str | None, **kw: Any) -> None:
    """Measure one load level."""
    check_level_options(concurrency, kw)
    if kw["profile"]:
        raise ConfigError("--profile runs several levels; use `loadgen sweep --profile ...`")
    if (concurrency and "," in concurrency) or (kw["rate"] and "," in kw["rate"]):
        raise ConfigError("run measures one level; use `loadgen sweep` for several values")
    loads = build_loads(concurrency, kw["rate"], kw["arrival"], kw["max_in_flight"],
                        kw["max_rate"], kw["seed"])
    await _run_command(loads, kw)


@cli.command(cls=cloup.Command)
@run_options(click.option("--concurrency", metavar="STREAMS[,STREAMS...]",
                          show_default="1,4,16", help="Closed loop: concurrent streams of "
                          "each level."))
@run_async
async def sweep(concurrency: str | None, **kw: Any) -> None:
    """Measure several load levels, each separately, into one results file."""
    check_level_options(concurrency, kw)
    if concurrency is None and kw["rate"] is None and not (kw["trace"] or kw["profile"]):
        concurrency = "1,4,16"
    loads = build_loads(concurrency, kw["rate"], kw["arrival"], kw["max_in_flight"],
                        kw["max_rate"], kw["seed"])
    await _run_command(loads, kw)


def main() -> None:
    cli(prog_name="loadgen")


if __name__ == "__main__":
    main()
