"""Run a scenario: its phases in order (A-B-A), each into its own file, then the reports.

For every phase: bring up the server (deploy it, start its ``server:`` command,
start the simulator, or use the running target), run the measurements, write ``DIR/phase-<label>.json``, and tear
down what was brought up, also when the phase fails or the run is stopped. A failed
phase is recorded (its error is in its file) and the next phases still run; a
stopped run (Ctrl-C) ends after the current phase's teardown. The reports
(``report.md``, ``report.html``, ``summary.json``, CSV) are then built from every
phase file in ``DIR``, including phases measured by an earlier (``--resume``d) run.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Callable, Sequence

from ..engine import RunControl
from ..errors import ConfigError, LoadgenError
from .phase import (
    COMPLETE,
    FAILED,
    INTERRUPTED,
    Endpoint,
    Measurer,
    PhaseDoc,
    is_complete,
    phase_file,
    read_phase_file,
)
from .cloudwatch import fetch_phase_metrics, phase_settings
from .schema import Phase, Scenario
from .servers import ServerPool, served

Log = Callable[[str], None]
SKIPPED = "skipped"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class RunOptions:
    out_dir: Path
    phases: Sequence[str] | None = None  # labels; None = all, in file order
    simulate: bool = False
    time_scale: float | None = None  # None: the scenario's simulate.time_scale (default 1)
    resume: bool = False  # skip phases whose file is complete

    def effective_time_scale(self, scenario: Scenario) -> float:
        if self.time_scale is not None:
            return self.time_scale
        return scenario.simulate.time_scale if scenario.simulate else 1.0


@dataclass(frozen=True)
class PhaseOutcome:
    label: str
    status: str  # complete, failed, interrupted, skipped
    file: Path
    error: str | None = None


@dataclass
class ScenarioRun:
    out_dir: Path
    outcomes: list[PhaseOutcome] = field(default_factory=list)
    report_files: dict[str, list[Path]] = field(default_factory=dict)
    summary: dict | None = None
    report_error: str | None = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return (not self.interrupted and self.report_error is None
                and all(o.status in (COMPLETE, SKIPPED) for o in self.outcomes))


def run_metadata(scenario: Scenario, options: RunOptions) -> dict:
    """Scalars describing the run, stamped on every phase file and the summary's ``run``."""
    hw = scenario.hardware
    info = {"name": scenario.name, "scenario_file": Path(scenario.path or "").name or None,
            "scenario_sha256": scenario.sha256, "instance_type": hw.instance_type,
            "gpu": hw.gpu, "region": hw.region, "price_per_hour": hw.price_per_hour,
            "currency": hw.currency, "simulated": options.simulate,
            "parameters": ", ".join(scenario.params_used) or None}
    if options.simulate:
        from .simulate import simulation_note

        scale = options.effective_time_scale(scenario)
        info.update(time_scale=scale, simulation_note=simulation_note(scale))
    return info


def check_out_dir(scenario: Scenario, options: RunOptions) -> None:
    """Never overwrite an earlier run's phase files unless asked to continue it."""
    if options.resume:
        return
    existing = [phase_file(options.out_dir, p.label) for p in scenario.select(options.phases)]
    existing = [path for path in existing if path.exists()]
    if existing:
        raise ConfigError(f"{options.out_dir} already holds {existing[0].name} from an earlier "
                          "run; pass --resume to continue that run, or choose another --out")


async def run_scenario(scenario: Scenario, options: RunOptions, *,
                       control: RunControl | None = None, log: Log = _stderr) -> ScenarioRun:
    """Run the selected phases in order, then write the reports. Never raises for a
    failing phase (it is recorded); raises ConfigError for bad options."""
    control = control or RunControl()
    selected = scenario.select(list(options.phases) if options.phases else None)
    check_out_dir(scenario, options)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    run = ScenarioRun(options.out_dir)
    info = run_metadata(scenario, options)
    background: list = []  # each phase's CloudWatch reads, running while the next phase does
    cancel = threading.Event()
    control.on_stop(cancel.set)  # Ctrl-C: keep what has arrived
    servers = ServerPool()  # servers phases keep running for later ones (keep_running)
    try:
        for phase in selected:
            if control.stopped:
                break
            path = phase_file(options.out_dir, phase.label)
            earlier = read_phase_file(path) if options.resume else None
            if is_complete(earlier):
                _note_resumed(earlier, scenario, phase, log)
                run.outcomes.append(PhaseOutcome(phase.label, SKIPPED, path))
                continue
            run.outcomes.append(await run_phase(scenario, phase, options, info, control, log,
                                                servers, background=background, cancel=cancel))
    finally:
        await servers.stop_all(log)
    if background:
        await asyncio.gather(*background)
    run.interrupted = control.stopped
    _write_reports(scenario, run, info, log)
    return run


def _note_resumed(earlier: dict, scenario: Scenario, phase: Phase, log: Log) -> None:
    log(f"[{phase.label}] complete in an earlier run: skipped (--resume)")
    sha = (earlier.get("scenario") or {}).get("scenario_sha256")
    if sha and scenario.sha256 and sha != scenario.sha256:
        log(f"[{phase.label}] warning: measured with a different version of the scenario file")


async def run_phase(scenario: Scenario, phase: Phase, options: RunOptions, info: dict,
                    control: RunControl, log: Log, servers: ServerPool | None = None, *,
                    background: list | None = None,
                    cancel: threading.Event | None = None) -> PhaseOutcome:
    """Measure one phase into its file; the outcome says how it ended. A sagemaker://
    phase's CloudWatch metrics are read after it: that task goes into ``background``."""
    path = phase_file(options.out_dir, phase.label)
    doc = PhaseDoc(path, phase, info)
    doc.save()
    say: Log = lambda message: log(f"[{phase.label}] {message}")  # noqa: E731
    say(f"phase {phase.order_index + 1}/{len(scenario.phases)}: checkpoint {phase.checkpoint}"
        + (" (SIMULATED)" if options.simulate else ""))
    try:
        async with _endpoint(scenario, phase, options, doc, control, say,
                             servers or ServerPool()) as endpoint:
            await Measurer(scenario, phase, endpoint, doc, control, say).run_all()
    except LoadgenError as exc:
        outcome = _failed(doc, phase, str(exc), say)
    except Exception as exc:  # noqa: BLE001 - a bug in one phase must not lose the others
        traceback.print_exc(file=sys.stderr)
        outcome = _failed(doc, phase, f"internal error: {type(exc).__name__}: {exc}", say)
    else:
        status = INTERRUPTED if control.stopped else COMPLETE
        doc.finish(status)
        say(f"{status}: {path}")
        outcome = PhaseOutcome(phase.label, status, path)
    task = fetch_phase_metrics(doc, phase_settings(scenario, phase),
                               cancel or threading.Event(), say)
    if task is not None:
        if background is None:
            await task
        else:
            background.append(task)
    return outcome


def _failed(doc: PhaseDoc, phase: Phase, error: str, say: Log) -> PhaseOutcome:
    doc.finish(FAILED, error)
    say(f"failed: {error}")
    return PhaseOutcome(phase.label, FAILED, doc.path, error)


@contextlib.asynccontextmanager
async def _endpoint(scenario: Scenario, phase: Phase, options: RunOptions, doc: PhaseDoc,
                    control: RunControl, log: Log,
                    servers: ServerPool) -> AsyncIterator[Endpoint]:
    """The server of a phase, up for the duration of the ``async with``."""
    if options.simulate:
        from .simulate import simulated_servers, simulation_block

        scale = options.effective_time_scale(scenario)
        doc.data["simulation"] = simulation_block(scenario, phase, scale)
        if phase.deploy is not None:
            doc.server["deploy"] = "skipped: simulated run (no AWS calls)"
        if phase.server is not None:
            doc.server["managed_server"] = "skipped: simulated run (no server started)"
        async with simulated_servers(scenario, phase, scale) as servers:
            yield Endpoint(servers.url, {}, servers.fidelity_url)
        return
    if phase.deploy is not None:
        from .deploy import deployed

        async with deployed(scenario, phase, options.out_dir, doc, control, log) as endpoint:
            yield endpoint
        return
    if phase.server is not None:
        async with served(scenario, phase, options.out_dir, doc, control, servers,
                          log) as endpoint:
            yield endpoint
        return
    assert phase.target is not None
    yield Endpoint(phase.target.url, phase.target.sagemaker_options())


def _write_reports(scenario: Scenario, run: ScenarioRun, info: dict, log: Log) -> None:
    """Reports from every phase file of this scenario in the directory (any run)."""
    from ..report import write_reports

    results, names = [], []
    for phase in scenario.phases:
        data = read_phase_file(phase_file(run.out_dir, phase.label))
        if data is not None:
            results.append(data)
            names.append(phase_file(run.out_dir, phase.label).name)
    if not results:
        run.report_error = "no phase produced a results file; nothing to report"
        return
    try:
        output = write_reports(run.out_dir, results, price_per_hour=scenario.hardware.price_per_hour,
                               run_info=info, drift_tolerance=scenario.drift_tolerance,
                               files=names)
    except LoadgenError as exc:
        run.report_error = f"report not written: {exc}"
        log(run.report_error)
        return
    run.summary, run.report_files = output.summary, output.files
