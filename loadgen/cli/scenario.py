"""``loadgen scenario validate FILE`` and ``loadgen scenario run FILE``.

The lead's CLI registers the :data:`scenario` group. Problems in a scenario file are
printed one per line as ``FILE:LINE: message`` (all of them, not just the first).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..engine import RunControl
from ..errors import ConfigError
from ..scenario.loader import Checked, check_file
from ..scenario.params import parse_param_options
from ..scenario.runner import RunOptions, ScenarioRun, run_scenario
from ..scenario.schema import Scenario
from .common import StopSignals, UserError, run_async

EXIT_PROBLEMS = 1  # validate found problems / a phase failed
EXIT_INTERRUPTED = 130


def _param_option(f):
    return click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
                        help="Value for ${KEY} in the file (overrides the environment). "
                             "Repeatable.")(f)


@click.group("scenario")
def scenario() -> None:
    """Comparison studies (A-B-A) from a scenario file: phases, measurements, reports."""


@scenario.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--simulate", is_flag=True,
              help="Check for a --simulate run: parameters it doesn't need may be unset.")
@_param_option
def validate(file: str, simulate: bool, params: tuple[str, ...]) -> None:
    """Check FILE and print every problem, one per line (FILE:LINE: message)."""
    checked = _check(file, params, simulate)
    if checked.problems:
        for problem in checked.problems:
            click.echo(problem.format(file))
        count = len(checked.problems)
        click.echo(f"{file}: {count} problem{'s' if count != 1 else ''}", err=True)
        sys.exit(EXIT_PROBLEMS)
    assert checked.scenario is not None
    click.echo(describe(checked.scenario))


def _check(file: str, params: tuple[str, ...], simulate: bool) -> Checked:
    """Check the file; print warnings (unused --param, parameters --simulate can do without)."""
    try:
        checked = check_file(file, parse_param_options(params), lenient=simulate)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    for name in checked.params.unused_given():
        click.echo(f"warning: --param {name} is not used by {file}", err=True)
    for warning in checked.warnings:
        click.echo(f"warning: {warning.format(file)} (a --simulate run goes on without it)",
                   err=True)
    return checked


def describe(parsed: Scenario) -> str:
    """A short account of a valid scenario."""
    order = " -> ".join(f"{p.label} ({p.checkpoint})" for p in parsed.phases)
    m = parsed.measurements
    measured = [name for name, spec in (("single stream", m.single_stream),
                                        ("fixed length", m.fixed_length),
                                        ("sweep c=" + ",".join(map(str, m.sweep.concurrency)),
                                         m.sweep), ("fidelity", m.fidelity)) if spec.enabled]
    price = (f"${parsed.hardware.price_per_hour:g}/h" if parsed.hardware.price_per_hour
             else "no price")
    lines = [f"{parsed.path}: ok: {parsed.name}",
             f"  hardware: {parsed.hardware.instance_type}, {price}",
             f"  phases: {order}",
             f"  measurements: {', '.join(measured)}"]
    deploys = sum(p.deploy is not None for p in parsed.phases)
    if deploys:
        lines.append(f"  deploys {deploys} SageMaker endpoint(s), each deleted after its phase")
    servers = [p for p in parsed.phases if p.server is not None]
    if servers:
        kept = sum(p.server.keep_running for p in servers)
        lines.append(f"  starts a server for {len(servers)} phase(s), each stopped after its "
                     "phase" + (f" ({kept} kept running for later phases)" if kept else ""))
    if parsed.simulate and parsed.simulate.profiles:
        lines.append(f"  --simulate profiles: {', '.join(parsed.simulate.profiles)}")
    return "\n".join(lines)


@scenario.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False),
              help="Results directory (default: ./NAME-results, ./NAME-simulated with "
                   "--simulate).")
@click.option("--phases", metavar="LABEL[,LABEL...]", help="Run only these phases (in file order).")
@click.option("--simulate", is_flag=True,
              help="Run every phase against the built-in simulator (no GPU, no AWS).")
@click.option("--time-scale", type=float, metavar="TIMES",
              show_default="the file's simulate.time_scale",
              help="With --simulate: run the simulator this many times faster than its "
                   "profile.")
@click.option("--resume", is_flag=True, help="Continue a run in --out: skip complete phases.")
@click.option("--yes", is_flag=True, help="Don't ask before deploying billable endpoints.")
@_param_option
def run(file: str, out: str | None, phases: str | None, simulate: bool, time_scale: float | None,
        resume: bool, yes: bool, params: tuple[str, ...]) -> None:
    """Run FILE's phases in order, write DIR/phase-LABEL.json each, then the reports."""
    parsed = _load(file, params, simulate)
    labels = [p.strip() for p in phases.split(",") if p.strip()] if phases else None
    if time_scale is not None and (not simulate or time_scale <= 0):
        raise UserError("--time-scale needs --simulate and a value > 0")
    default_out = f"{parsed.name}-{'simulated' if simulate else 'results'}"
    options = RunOptions(Path(out or default_out), labels, simulate, time_scale, resume)
    try:
        selected = parsed.select(labels)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if not simulate:
        _confirm_deploys(parsed, selected, yes)
    result = run_async(_run)(parsed, options)
    _print_outcome(result, simulate)
    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if not result.ok:
        sys.exit(EXIT_PROBLEMS)


def _load(file: str, params: tuple[str, ...], simulate: bool) -> Scenario:
    checked = _check(file, params, simulate)
    if checked.problems:
        for problem in checked.problems:
            click.echo(problem.format(file), err=True)
        raise UserError(f"{file} has {len(checked.problems)} problem(s); fix them and run "
                        "again")
    assert checked.scenario is not None
    return checked.scenario


def _confirm_deploys(parsed: Scenario, selected: list, yes: bool) -> None:
    deploys = [p for p in selected if p.deploy is not None]
    if not deploys or yes:
        return
    price = parsed.hardware.price_per_hour
    cost = f", ${price:g}/h while each is up" if price else ""
    message = (f"this run deploys {len(deploys)} SageMaker endpoint(s) one after another "
               f"({deploys[0].deploy.instance_type}{cost}; about 10 minutes to start each) "
               "and deletes each after its phase")
    if not sys.stdin.isatty():
        raise UserError(f"{message}; pass --yes to confirm")
    click.confirm(f"{message}. Continue?", abort=True, err=True)


async def _run(parsed: Scenario, options: RunOptions) -> ScenarioRun:
    control = RunControl()
    # SIGTERM tears down like a first Ctrl-C: an endpoint left running costs money. After a
    # second signal, a third aborts (a teardown in progress may then be left behind).
    StopSignals(control,
                stopping="stopping: tearing down what was deployed, keeping what was measured "
                         "(Ctrl-C twice more to abort)",
                again="teardown in progress; one more Ctrl-C aborts it (then delete leftovers "
                      "with: loadgen endpoint delete --record DIR/deployments/FILE)").install()
    return await run_scenario(parsed, options, control=control,
                              log=lambda message: click.echo(message, err=True))


def _print_outcome(result: ScenarioRun, simulate: bool) -> None:
    banner = "SIMULATED run: numbers come from the built-in simulator, not a GPU. "
    for outcome in result.outcomes:
        detail = f": {outcome.error}" if outcome.error else ""
        click.echo(f"{outcome.label}: {outcome.status}{detail}", err=True)
    summary = result.summary or {}
    for files in result.report_files.values():
        for path in files:
            click.echo(f"report: {path}")
    if result.report_error:
        click.echo(result.report_error, err=True)
    if simulate:
        click.echo(banner.strip(), err=True)
    _print_answer(summary)


def _print_answer(summary: dict) -> None:
    """The run ends with its answer: the headline sentence, then the drift verdict."""
    from ..report.headline import headline_sentence

    if summary.get("comparison"):
        click.echo(headline_sentence(summary), err=True)
    drift = summary.get("drift") or {}
    if drift.get("verdict"):
        click.echo(f"A-B-A drift: {drift['verdict']}", err=True)
