"""Scenarios: a whole comparison study (checkpoint A vs B, A-B-A) from one YAML file.

    from loadgen.scenario import load_scenario, run_scenario, RunOptions
    study = load_scenario("scenarios/demo-simulated.yaml")
    run = asyncio.run(run_scenario(study, RunOptions(Path("out"), simulate=True)))
    print(run.report_files["md"])

Modules: :mod:`.schema` (file format, dataclasses), :mod:`.loader` (YAML, parameters,
every problem with its line), :mod:`.runner` (phases in order, reports),
:mod:`.phase` (one phase's measurements and file), :mod:`.deploy` (SageMaker
deploy/teardown around a phase), :mod:`.servers` (a phase's ``server:`` started and
stopped around it), :mod:`.simulate` (``--simulate`` profiles) (the ``loadgen scenario`` command is
:mod:`loadgen.cli.scenario`).
"""

from .loader import ScenarioError, check_file, load_scenario
from .runner import PhaseOutcome, RunOptions, ScenarioRun, run_scenario
from .schema import Scenario

__all__ = ["PhaseOutcome", "RunOptions", "Scenario", "ScenarioError", "ScenarioRun",
           "check_file", "load_scenario", "run_scenario"]
