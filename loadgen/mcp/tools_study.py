"""Study tools: ``validate_scenario``, ``run_scenario``, ``get_report``, ``compare_runs``.

Files are named by path (relative paths are relative to the directory the server was
started in) or, for what a run wrote, by its run id.
"""

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from mcp.server import MCPServer
from pydantic import BaseModel, Field

from ..cli.scenario import describe
from ..errors import ConfigError
from ..report.compare import compare_runs as compare_results
from ..report.compare_text import format_comparison
from ..report.labels import pair_labels
from ..report.files import read_results, report_directory
from ..scenario import RunOptions, check_file
from ..scenario import run_scenario as run_scenario_phases
from ..scenario.loader import Checked
from ..scenario.params import parse_param_options
from ..scenario.phase import COMPLETE
from ..scenario.runner import SKIPPED
from ..scenario.schema import Phase, Scenario
from .arguments import PATH_CHARS
from .confine import (
    RESULTS_MAX_BYTES,
    SCENARIO_MAX_BYTES,
    allow_api_key_env,
    allow_aws_endpoint,
    allow_target,
    allowed_path,
    readable_file,
    results_directory,
)
from .options import ServerOptions
from .runs import LOAD, RESULTS_FILE, SCENARIO, Run, RunManager, is_run_id
from .toolkit import QUICK_S, READ_ONLY, bounded, refuse_without_deploy
from .tools_runs import StartedRun, results_uri
from .tools_servers import check_scenario_servers

REPORT_S = 120.0  # building a report reads every phase file (and bootstraps CIs)
Params = Annotated[list[str] | None, Field(description="KEY=VALUE values for ${KEY} in the "
                                          "file (override the server's environment).")]


class ScenarioCheck(BaseModel):
    ok: bool
    problems: list[str] = Field(description="every problem, as FILE:LINE: message")
    warnings: list[str] = Field(default_factory=list)
    description: str | None = Field(None, description="what the scenario does, when it is valid")
    deploys: int = Field(0, description="SageMaker endpoints a real (not simulated) run deploys")


class Report(BaseModel):
    directory: str
    format: str
    text: str | None = Field(None, description="format md: the Markdown report")
    summary: dict[str, Any] | None = Field(None, description="format json: summary.json")
    files: list[str] = Field(description="report files written")


class Comparison(BaseModel):
    a: str = Field(description="results file of run A (the baseline)")
    b: str = Field(description="results file of run B (the candidate)")
    labels: list[str]
    text: str = Field(description="the comparison as `loadgen compare` prints it")
    comparison: dict[str, Any] = Field(description="B/A ratios per level and metric, fidelity")


def _params(values: list[str] | None) -> dict[str, str]:
    return parse_param_options(list(values or ()))


def _scenario_file(options: ServerOptions, file: str) -> Path:
    return readable_file(options, file, "scenario file", SCENARIO_MAX_BYTES)


def _is_scenario(path: Path) -> bool:
    """Whether the file is a loadgen scenario (a YAML mapping with a top-level ``phases``
    key): only such a file's problems are shown, since they quote its lines."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:  # a scenario with a syntax error still says phases: at the left
        return re.search(r"^[\"']?phases[\"']?\s*:", text, re.MULTILINE) is not None
    return isinstance(root, yaml.MappingNode) and any(
        isinstance(key, yaml.ScalarNode) and key.value == "phases" for key, _ in root.value)


def _problems(file: str, path: Path, checked: Checked) -> list[str]:
    """The problems to show: every one of a scenario; for another file (a client may name
    any file it can guess), one line that quotes nothing from it."""
    if not checked.problems or _is_scenario(path):
        return [problem.format(file) for problem in checked.problems]
    return [f"{file}: not a loadgen scenario (no top-level phases: key); nothing from it is "
            "shown"]


def _checked_scenario(options: ServerOptions, file: str, params: dict[str, str],
                      simulate: bool) -> Scenario:
    path = _scenario_file(options, file)
    checked = check_file(path, params, lenient=simulate)
    problems = _problems(file, path, checked)
    if problems:
        raise ConfigError(f"{file} has {len(problems)} problem(s): " + "; ".join(problems[:5])
                          + " (validate_scenario lists them all)")
    assert checked.scenario is not None
    return checked.scenario


def _check_real_run(options: ServerOptions, scenario: Scenario, phases: list[Phase]) -> None:
    """What a real scenario run would send and read, within the server's allowances."""
    for phase in phases:
        if phase.target is not None and phase.target.url:
            allow_target(options, phase.target.url, f"phase {phase.label}'s target")
            allow_aws_endpoint(options, phase.target.endpoint_url)
    key = scenario.request.api_key_env
    if key and key in os.environ:
        allow_api_key_env(options, key)


def _check_prompts(options: ServerOptions, scenario: Scenario) -> None:
    if scenario.request.prompts and scenario.path:
        path = Path(scenario.path).parent / scenario.request.prompts
        readable_file(options, str(path), "prompts file", RESULTS_MAX_BYTES)


def _results_file(manager: RunManager, ref: str) -> Path:
    """A results file named by a load run's id or by its path (inside the allowed
    directories, a regular file under the size cap)."""
    if not is_run_id(ref):
        return readable_file(manager.options, ref, "results file", RESULTS_MAX_BYTES)
    directory = manager.directory_of(ref)
    if manager.record(ref)["kind"] == LOAD:
        return manager.run_file(ref, RESULTS_FILE)
    phases = sorted(p.name for p in directory.glob("phase-*.json"))
    raise ConfigError(f"run {ref} is a scenario run: name one of its phase files, e.g. "
                      f"{directory / (phases[0] if phases else 'phase-LABEL.json')}")


def _directory(manager: RunManager, ref: str) -> Path:
    """A results directory named by a run id or by its path, inside the allowed
    directories, whose results files are all inside them too (the report is written there)."""
    if is_run_id(ref):
        directory = manager.directory_of(ref)
    else:
        directory = allowed_path(manager.options, ref, "dir")
    return results_directory(manager.options, directory, "dir")


def register(server: MCPServer, manager: RunManager) -> None:
    """Add the scenario, report and comparison tools to ``server``."""
    options = manager.options

    @server.tool(annotations=READ_ONLY)
    @bounded(QUICK_S)
    async def validate_scenario(
        file: Annotated[str, Field(max_length=PATH_CHARS,
                                   description="Scenario YAML file.")],
        simulate: Annotated[bool, Field(description="Check it for a simulated run: "
                            "parameters only a real run needs may be unset.")] = False,
        params: Params = None,
    ) -> ScenarioCheck:
        """Check a scenario file and list every problem with its line."""
        path = _scenario_file(options, file)
        checked = check_file(path, _params(params), lenient=simulate)
        quotable = checked.scenario is not None or _is_scenario(path)
        warnings = [f"{w.format(file)} (a simulated run goes on without it)"
                    for w in checked.warnings if quotable]
        warnings += [f"param {name} is not used by {file}"
                     for name in checked.params.unused_given()]
        if checked.problems:
            return ScenarioCheck(ok=False, problems=_problems(file, path, checked),
                                 warnings=warnings)
        parsed = checked.scenario
        return ScenarioCheck(ok=True, problems=[], warnings=warnings,
                             description=describe(parsed),
                             deploys=sum(p.deploy is not None for p in parsed.phases))

    @server.tool()
    @bounded(QUICK_S)
    async def run_scenario(
        file: Annotated[str, Field(max_length=PATH_CHARS, description="Scenario YAML file "
                                   "(a whole A-B-A study).")],
        simulate: Annotated[bool, Field(description="Run every phase against the built-in "
                            "simulator: no GPU, no AWS.")] = False,
        phases: Annotated[list[str] | None, Field(description="Run only these phase labels "
                          "(in file order).")] = None,
        time_scale: Annotated[float | None, Field(gt=0, description="Simulated runs: run the "
                              "simulator this many times faster than its profile.")] = None,
        params: Params = None,
    ) -> StartedRun:
        """Start a scenario run in the background (phases in order, each into its own file,
        then the reports); returns a run_id at once. A real run that deploys endpoints needs
        a server started with --allow-deploy; each endpoint is deleted after its phase."""
        if time_scale is not None and not simulate:
            raise ConfigError("time_scale needs simulate=true")
        parsed = _checked_scenario(options, file, _params(params), simulate)
        selected = parsed.select(phases)
        _check_prompts(options, parsed)
        if not simulate:
            _check_real_run(options, parsed, selected)
        if not simulate and any(p.deploy is not None for p in selected):
            refuse_without_deploy(options.allow_deploy, "this scenario (it deploys endpoints)")
        if not simulate and any(p.server is not None for p in selected):
            check_scenario_servers(options, selected)
        widest = max(parsed.measurements.sweep.concurrency, default=1)
        if widest > options.max_concurrency:
            raise ConfigError(f"the scenario sweeps up to concurrency {widest}, above this "
                              f"server's limit of {options.max_concurrency} "
                              "(loadgen mcp --max-concurrency)")

        async def body(run: Run) -> None:
            outcome = await run_scenario_phases(
                parsed, RunOptions(run.directory, phases, simulate, time_scale),
                control=run.control, log=run.log.append)
            failed = [f"{o.label}: {o.error}" for o in outcome.outcomes
                      if o.status not in (COMPLETE, SKIPPED) and o.error]
            if failed or outcome.report_error:
                raise ConfigError("; ".join(failed + [outcome.report_error or ""]).strip("; "))

        request = {"file": file, "simulate": simulate, "phases": phases,
                   "time_scale": time_scale, "params": sorted(_params(params))}
        run = manager.start(SCENARIO, request, body)
        return StartedRun(run_id=run.run_id, state=run.state, results=results_uri(run.run_id),
                          directory=str(run.directory), notes=[], request=request)

    @server.tool()
    @bounded(REPORT_S)
    async def get_report(
        dir: Annotated[str, Field(max_length=PATH_CHARS, description="A run id, or a "
                                  "directory of loadgen results "
                                  "files.")],
        format: Annotated[Literal["md", "json"], Field(description="md: the Markdown report; "
                          "json: the summary behind it.")] = "md",
        labels: Annotated[list[str] | None, Field(description="Names for the runs, one per "
                          "results file in study order (as `loadgen report --labels`; default: "
                          "phase labels, else model names).")] = None,
    ) -> Report:
        """Build the report of a run's results (as `loadgen report DIR`) and return it."""
        directory = _directory(manager, dir)
        output = report_directory(directory, formats=(format,), labels=labels)
        files = [str(path) for paths in output.files.values() for path in paths]
        text = (directory / "report.md").read_text(encoding="utf-8") if format == "md" else None
        return Report(directory=str(directory), format=format, text=text,
                      summary=output.summary if format == "json" else None, files=files)

    @server.tool(annotations=READ_ONLY)
    @bounded(QUICK_S)
    async def compare_runs(
        a: Annotated[str, Field(max_length=PATH_CHARS, description="Run A, the "
                                "baseline: a start_run run id or a "
                                "results file.")],
        b: Annotated[str, Field(max_length=PATH_CHARS, description="Run B, the "
                                "candidate: a run id or a results "
                                "file.")],
        labels: Annotated[list[str] | None, Field(min_length=2, max_length=2,
                          description="Names for A and B (default: phase labels, else model "
                          "or file names).")] = None,
    ) -> Comparison:
        """Compare run B with run A: B/A ratios of throughput and latency per load level
        (above 1 is faster for throughput, below 1 is faster for latency), and fidelity."""
        paths = [_results_file(manager, a), _results_file(manager, b)]
        results = [read_results(path) for path in paths]
        names = pair_labels(labels, results, [a, b])
        if names[0] == names[1]:  # e.g. two runs' results.json: their ids tell them apart
            names = (a, b)
        result = compare_results(*results, labels=names)
        return Comparison(a=str(paths[0]), b=str(paths[1]), labels=list(names),
                          text=format_comparison(result), comparison=result)
