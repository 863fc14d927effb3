"""`--help` grouped by purpose, with units and defaults; the results table's units and its
flagged p99 (issue 12)."""

from __future__ import annotations

import re

import click
import cloup
import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.metrics import P99_MIN_SAMPLES
from loadgen.report.table import TABLE_COLUMNS, format_table
from tests.helpers.report_fixtures import make_level

RUN_GROUPS = ("Target:", "Load (per level):", "Requests:",
              "Workload (prompts, datasets, traces):", "Timeouts (per request):",
              "SageMaker (sagemaker:// targets only):", "Load generator processes:",
              "Measurement and output:")
# A numeric option's metavar names its unit; a seed is an identifier, not a quantity.
UNITS = {"S", "MS", "TOKENS", "REQ/S", "REQUESTS", "STREAMS", "LEVELS", "PREFIXES", "TURNS",
         "TIMES", "FRACTION", "INSTANCES", "EVENTS", "RUNS", "PORT", "USD/H", "LINES"}
UNITLESS = {"seed", "temperature"}  # identifiers and ratios, not quantities


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_and_sweep_help_is_grouped_with_units_and_defaults(command):
    text = _help(command)
    positions = [text.index(f"\n{heading}\n") for heading in RUN_GROUPS]
    assert positions == sorted(positions)  # in this order
    assert "Other options:" in text and text.index("Other options:") > positions[-1]
    flat = " ".join(text.split())  # help text wraps; compare it as one line
    rate = "--rate REQ/S[,REQ/S...]" if command == "sweep" else "--rate REQ/S "
    for expected in ("--duration S Seconds per level.", "--timeout S",
                     "[default: 600.0]", rate, "requests/s",
                     "--input-tokens TOKENS", "[default: 128]", "--max-rate REQ/S",
                     "[default: (no cap)]", "--graceful-stop S", "[default: 30.0]"):
        assert expected in flat, expected
    # The timeouts sit under their heading, not elsewhere.
    timeouts = text[text.index("Timeouts (per request):"):text.index("SageMaker (")]
    assert "--idle-timeout S" in timeouts and "--connect-timeout S" in timeouts
    sagemaker = text[text.index("SageMaker ("):text.index("Load generator processes:")]
    assert "--payload-format" in sagemaker and "--inference-component" in sagemaker
    default_levels = "[default: (1)]" if command == "run" else "[default: (1,4,16)]"
    assert default_levels in flat


def test_run_help_lists_no_option_run_rejects():
    """run measures one level: no comma lists, no profile (sweep's)."""
    run_help, sweep_help = _help("run"), _help("sweep")
    for sweep_only in ("--profile", "--profile-rates", "--saturation-concurrency", "[,"):
        assert sweep_only not in run_help and sweep_only in sweep_help


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_run_and_sweep_option_belongs_to_a_group(command):
    """A new option added without a group fails here (it would land in "Other options")."""
    command = cli.commands[command]
    assert isinstance(command, cloup.Command)
    options = [p for p in command.params if isinstance(p, click.Option)]
    grouped = [option for group in command.option_groups for option in group.options]
    assert len(options) > 50 and sorted(o.name for o in grouped) == sorted(o.name for o in options)
    assert [option.name for option in command.ungrouped_options] == []


def _commands(group: click.Group, ctx: click.Context):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
        yield sub.command_path, command, sub
        if isinstance(command, click.Group):
            yield from _commands(command, sub)


def test_every_numeric_option_of_every_command_names_its_unit_and_default():
    root = cli.make_context("loadgen", [], resilient_parsing=True)
    checked, problems = 0, []
    for path, command, ctx in _commands(cli, root):
        for option in command.params:
            numeric = isinstance(option.type, (click.types.IntParamType,
                                               click.types.FloatParamType))
            if not isinstance(option, click.Option) or option.hidden or not numeric:
                continue
            checked += 1
            record = option.get_help_record(ctx)
            if "[default:" not in record[1]:
                problems.append(f"{path} {option.opts[0]}: no default shown")
            if option.name not in UNITLESS and option.metavar not in UNITS:
                problems.append(f"{path} {option.opts[0]}: metavar {option.metavar!r} "
                                "is not a unit")
    assert checked > 40 and problems == []


def test_level_lists_name_their_units_too():
    for command in ("run", "sweep"):
        options = {p.name: p for p in cli.commands[command].params}
        assert options["concurrency"].metavar.startswith("STREAMS")
        assert options["rate"].metavar.startswith("REQ/S")


def test_results_table_header_says_statistic_and_unit():
    header = format_table([make_level(1, 45.6, 51.3, requests=200)]).splitlines()[0]
    for column in ("out tok/s", "req/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
                   "ITL p99 ms", "decode tok/s p50"):
        assert column in header and column in TABLE_COLUMNS


def test_results_table_flags_a_p99_from_fewer_than_100_samples():
    few = make_level(1, 45.6, 51.3, requests=P99_MIN_SAMPLES - 1)  # 99 TTFTs, ~5000 ITL gaps
    many = make_level(4, 171.6, 49.0, requests=P99_MIN_SAMPLES)
    lines = format_table([few, many]).splitlines()
    cells = {row[0]: row for row in (re.split(r"\s{2,}", line.strip()) for line in lines[2:4])}
    column = list(TABLE_COLUMNS).index
    assert cells["c=1"][column("TTFT p99 ms")].endswith("†")
    assert not cells["c=1"][column("TTFT p50 ms")].endswith("†")
    assert not cells["c=1"][column("ITL p99 ms")].endswith("†")  # thousands of gaps
    assert not cells["c=4"][column("TTFT p99 ms")].endswith("†")
    assert lines[-1].startswith("† fewer than 100 samples")
    assert "†" not in format_table([many])  # nothing flagged: no mark, no footnote
