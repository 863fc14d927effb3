"""One run description, many front doors (issue 17): every run option is declared once and
reaches the same field, with the same default, from the CLI, a scenario, MCP and the API."""

from __future__ import annotations

import dataclasses
import inspect

import click
import pytest

from loadgen import api
from loadgen.cli.main import cli, run_config_from
from loadgen.errors import ConfigError
from loadgen.mcp.loadrun import OUTPUT_FILES, LoadRequest
from loadgen.mcp.options import ServerOptions
from loadgen.mcp.start_args import MCP_DEFAULTS, run_arguments
from loadgen.option import OptionField
from loadgen.runconfig import RunConfig, build_run, run_options
from loadgen.scenario.phase import Endpoint, run_values
from loadgen.scenario.schema import (
    REQUEST,
    SCENARIO_ELSEWHERE,
    SCENARIO_NOT_OFFERED,
    TARGET,
    Phase,
    RequestDefaults,
    Scenario,
)

OPTIONS = run_options()
HTTP, SAGEMAKER = "http://127.0.0.1:9", "sagemaker://my-endpoint"
NEEDS_A_FILE = {"trace"}  # building the run reads it: given a file in its own tests
LIMITS = ServerOptions(max_concurrency=10_000, max_duration_s=1e9)


def _part(config: RunConfig, field: OptionField):
    """Where ``field``'s value ends up in a built run."""
    if field.part == "levels":
        return config.loads
    holder = {"target": config.target, "options": config.options, "stop": config.stop,
              "timeouts": config.options.timeouts, "workload": config.workload,
              "measurement": config.measurement, "cloudwatch": config.cloudwatch,
              "run": config}[field.part]
    return getattr(holder, field.name)


def _sample(field: OptionField):
    """A public value other than the default, within the option's bounds."""
    spec, kind = field.spec, field.spec.item or field.base_type
    if spec.choices:
        value = next(c for c in reversed(spec.choices) if c != field.default)
    elif field.key == "slos":
        value = "ttft_ms<=500"
    elif field.key == "workers":
        return 2
    elif kind is bool:
        return not field.default
    elif kind is int:
        value = int(max(spec.low or 0, 1)) + 2
    elif kind is float:
        value = 0.5 if spec.high is not None else 2.5
    elif field.key == "target":
        return HTTP
    else:
        value = ("x.jsonl" if field.key not in ("endpoint_url", "cloudwatch_endpoint_url")
                 else "http://127.0.0.1:1")
    return [value] if spec.item is not None else value


def _context(field: OptionField) -> dict:
    """What else a sample needs: a SageMaker URL for SageMaker options, a rate for the
    open-loop options."""
    if field.key == "target":
        return {}  # the default: the built-in simulator
    extra = {"target": SAGEMAKER if field.part == "target" else HTTP}
    if field.key in ("arrival", "max_in_flight", "rate"):  # MCP caps an uncapped open loop
        extra.update(rate=[2.0], max_in_flight=5)
    if field.key == "max_rate":  # sweep's own default levels are 1,4,16
        extra["concurrency"] = [3]
    return extra


def _cli_args(values: dict) -> list[str]:
    args = []
    for key, value in values.items():
        field = next(f for f in OPTIONS if f.key == key)
        if field.base_type is bool:
            args.append(field.flag if value else f"--no-{field.flag[2:]}")
        elif isinstance(value, list):
            if field.spec.item is str:
                for item in value:
                    args += [field.flag, item]
            else:
                args += [field.flag, ",".join(map(str, value))]
        else:
            args += [field.flag, str(value)]
    return args


def via_cli(values: dict) -> RunConfig:
    sweep = cli.commands["sweep"]
    ctx = sweep.make_context("sweep", _cli_args(values))
    return run_config_from(dict(ctx.params), "sweep")


def via_api(values: dict) -> RunConfig:
    return api.build_config(**values)


def via_mcp(values: dict) -> RunConfig:
    return LoadRequest(values).checked(LIMITS)[2]


def via_scenario(values: dict) -> RunConfig:
    target = values.pop("target", None)
    sagemaker = {k: values.pop(k) for k in list(values) if k in TARGET.fields and k != "url"}
    scenario = Scenario(name="s", hardware=None, measurements=None, phases=(),
                        request=RequestDefaults(values))
    phase = Phase(label="a", checkpoint="c", order_index=0)
    return build_run(run_values(scenario, phase, Endpoint(target, sagemaker)))


def test_every_option_is_declared_once_with_help_and_a_group():
    keys = [f.key for f in OPTIONS]
    assert len(keys) == len(set(keys)) and len(keys) > 55
    assert all(f.spec.help and f.spec.group for f in OPTIONS)


@pytest.mark.parametrize("field", OPTIONS, ids=lambda f: f.key)
def test_every_option_reaches_every_front_door_with_the_same_default(field):
    # CLI: `sweep` offers every option (`run` all but the sweep-only ones)
    params = {p.name: p for p in cli.commands["sweep"].params}
    assert field.key in params and field.flag in params[field.key].opts[0]
    run_params = {p.name for p in cli.commands["run"].params}
    assert (field.key in run_params) is not field.spec.sweep_only
    # MCP start_run: an argument by the same name, with the same default
    arguments = {p.name: p for p in run_arguments()}
    default = field.public_default()
    if field.key in MCP_DEFAULTS:  # a documented safety default of the MCP server
        assert arguments[field.key].default == MCP_DEFAULTS[field.key][0]
    elif field.key != "target":
        assert arguments[field.key].default == (default if default != [] else None)
    # Scenario: a key of request: (or the target), else a documented reason
    if field.part == "target":
        assert (field.name if field.key != "target" else "url") in TARGET.fields
    elif field.key in REQUEST.fields:
        assert getattr(RequestDefaults(), field.key) == default
    else:
        assert (SCENARIO_ELSEWHERE | SCENARIO_NOT_OFFERED).get(field.key)
    # API: a keyword of sweep / build_config (run_options) with the same default
    assert "run_options" in inspect.signature(api.sweep).parameters
    assert _part(build_run({}), field) == _part(api.build_config(), field)


def test_defaults_are_the_same_through_every_door():
    nothing = build_run({"target": HTTP, "requests": 20})
    assert via_api({"target": HTTP, "requests": 20}) == nothing
    # MCP's default count: 20 per level; its key: none unless named (MCP_DEFAULTS)
    assert via_mcp({"target": HTTP, "api_key_env": "OPENAI_API_KEY"}) == nothing
    assert dataclasses.replace(via_cli({"target": HTTP, "requests": 20}),
                               loads=nothing.loads) == nothing  # sweep's own levels: 1,4,16
    assert via_scenario({"target": HTTP, "requests": 20}) == nothing


@pytest.mark.parametrize("field", [f for f in OPTIONS if f.key not in NEEDS_A_FILE],
                         ids=lambda f: f.key)
def test_a_value_given_to_any_door_lands_in_the_same_field(field, tmp_path):
    sample = _sample(field)
    if field.key in OUTPUT_FILES:  # MCP writes them in the run's directory: a plain name
        sample = "out.jsonl"
    elif field.spec.path is not None or field.key == "tokenizer":  # MCP reads real files
        (tmp_path / "x.jsonl").write_text("{}\n")
        sample = str(tmp_path / "x.jsonl")
    values = {**_context(field), field.key: sample}
    if field.key == "profile":
        values["saturation_concurrency"] = 4
        values["slos"] = ["ttft_ms<=500"]  # slo-search (the last choice) needs an SLO
    if field.key == "rate_search":  # an option of --profile slo-search
        values.update(profile="slo-search", slos=["ttft_ms<=500"])
    expected = _part(build_run(values), field)
    assert expected != _part(build_run(_context(field)), field)  # the sample is not a default
    doors = [via_api, via_cli, via_mcp]
    if field.key in REQUEST.fields or field.part == "target":
        doors.append(via_scenario)
    for door in doors:
        assert _part(door(dict(values)), field) == expected, door.__name__


def test_out_of_bounds_and_unknown_values_are_one_line_errors_naming_the_option():
    with pytest.raises(ConfigError, match=r"^requests must be >= 1 \(got 0\)$"):
        api.build_config(HTTP, requests=0)
    with pytest.raises(ConfigError, match="unknown keyword.*slo.*accepted: .*slos"):
        api.build_config(HTTP, slo=["ttft_ms<=5"])
    with pytest.raises(ConfigError, match="must be a finite number"):
        LoadRequest({"target": HTTP, "timeout": float("nan")}).checked(LIMITS)
    with pytest.raises(ConfigError, match="must be one of chat, completions"):
        via_scenario({"target": HTTP, "api": "grpc"})
    with pytest.raises(click.BadParameter, match="no empty items"):
        via_cli({"concurrency": "1,,4"})
