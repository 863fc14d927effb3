"""Scenario files: every problem reported at once with its line, parameters, shipped files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.errors import ConfigError
from loadgen.scenario import ScenarioError, check_file, load_scenario
from loadgen.scenario.loader import check_text
from loadgen.scenario.params import Params, parse_param_options, substitute

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

VALID = """\
name: study
hardware:
  instance_type: ml.g6.xlarge
  price_per_hour: 1.1267
measurements:
  single_stream: {requests: 2, output_tokens: 16}
  sweep: {concurrency: [1, 4], requests: 4}
phases:
  - label: bf16-a
    checkpoint: bf16
    model: m
    target: http://127.0.0.1:8000
  - label: qat
    checkpoint: qat
    target: {url: sagemaker://qat-endpoint, region: us-east-2}
"""


def check(text: str, given: dict | None = None, environ: dict | None = None,
          lenient: bool = False):
    params = Params(given or {}, environ or {}, lenient=lenient)
    return check_text(textwrap.dedent(text), "s.yaml", params)


def messages(text: str, **kwargs) -> list[str]:
    return [p.format("s.yaml") for p in check(text, **kwargs).problems]


def test_a_valid_file_builds_the_scenario_with_defaults():
    scenario = check(VALID).scenario
    assert scenario is not None
    assert [p.label for p in scenario.phases] == ["bf16-a", "qat"]
    assert [p.order_index for p in scenario.phases] == [0, 1]
    assert scenario.hardware.price_per_hour == 1.1267
    assert scenario.measurements.sweep.concurrency == (1, 4)
    assert scenario.measurements.fixed_length.output_tokens == 512  # default
    assert scenario.request.temperature == 0.0 and scenario.request.api == "chat"
    qat = scenario.phase("qat")
    assert qat.target.sagemaker_options()["region"] == "us-east-2"
    assert scenario.phase("bf16-a").target.sagemaker_options() == {}


def test_unknown_key_gets_a_did_you_mean_and_its_line():
    text = VALID.replace("  price_per_hour: 1.1267\n", "  price_per_hour: 1.1267\n  regoin: x\n")
    assert messages(text) == ["s.yaml:5: hardware: unknown key 'regoin'; did you mean 'region'?"]


def test_unknown_key_without_a_close_match_lists_the_known_keys():
    text = VALID.replace("phases:", "zzz: 1\nphases:")
    (message,) = messages(text)
    assert message.startswith("s.yaml:8: unknown key 'zzz'; known keys: ")
    assert "measurements" in message and "phases" in message


def test_wrong_types_say_what_was_expected_and_what_was_found():
    text = (VALID.replace("price_per_hour: 1.1267", "price_per_hour: cheap")
            .replace("requests: 2,", "requests: [2],")
            .replace("model: m", "model: 8"))
    assert messages(text) == [
        "s.yaml:4: hardware.price_per_hour must be a number, got the text 'cheap'",
        "s.yaml:6: measurements.single_stream.requests must be an integer, got a list",
        's.yaml:11: phases[0].model must be text, got the number 8 (quote it: "8")',
    ]


def test_yaml_booleans_in_text_fields_are_caught():
    text = VALID.replace("  price_per_hour: 1.1267\n", "  price_per_hour: 1.1267\n  region: no\n")
    assert messages(text) == ['s.yaml:5: hardware.region must be text, got the boolean false '
                              '(quote it: "no")']


def test_missing_required_keys_are_reported_where_the_mapping_starts():
    text = VALID.replace("    checkpoint: qat\n", "")
    assert messages(text) == ["s.yaml:13: phases[1]: missing required key 'checkpoint'"]
    assert messages("name: x\n") == [
        "s.yaml:1: missing required key 'hardware'",
        "s.yaml:1: missing required key 'measurements'",
        "s.yaml:1: missing required key 'phases'",
    ]


def test_duplicate_labels_name_both_lines():
    text = VALID.replace("label: qat", "label: bf16-a")
    assert messages(text) == ["s.yaml:13: phases[1]: duplicate phase label 'bf16-a' (also on "
                              "line 9); labels must be unique, e.g. bf16-a, qat, bf16-b"]


def test_target_and_deploy_together_and_neither():
    both = VALID.replace("    target: http://127.0.0.1:8000\n",
                         "    target: http://127.0.0.1:8000\n"
                         "    deploy: {image: img, role: arn}\n")
    assert messages(both) == ["s.yaml:13: phases[0]: give one of target (a running server), "
                              "deploy (a SageMaker endpoint loadgen creates) or server (a "
                              "process loadgen starts), not target and deploy"]
    neither = VALID.replace("    target: http://127.0.0.1:8000\n", "")
    assert messages(neither) == ["s.yaml:9: phases[0]: missing target, deploy or server: say "
                                 "which server this phase measures"]


def test_negative_price_and_bad_urls():
    text = (VALID.replace("price_per_hour: 1.1267", "price_per_hour: -2")
            .replace("http://127.0.0.1:8000", "127.0.0.1:8000"))
    assert messages(text) == [
        "s.yaml:4: hardware.price_per_hour must be a positive number of dollars per hour "
        "(e.g. 1.1267), got -2",
        "s.yaml:12: phases[0].target must be http(s)://HOST:PORT or sagemaker://ENDPOINT_NAME, "
        "got '127.0.0.1:8000'",
    ]


def test_sweep_problems():
    empty = VALID.replace("concurrency: [1, 4], requests: 4", "concurrency: [], requests: 4")
    assert messages(empty) == ["s.yaml:7: measurements.sweep.concurrency is empty: give at "
                               "least one value, e.g. [1, 4, 16]"]
    endless = VALID.replace("concurrency: [1, 4], requests: 4", "concurrency: [1, 0]")
    assert messages(endless) == [
        "s.yaml:7: each value of measurements.sweep.concurrency must be > 0, got 0",
        "s.yaml:7: measurements.sweep: say when each level ends: requests, "
        "requests_per_stream or duration",
    ]
    both = VALID.replace("requests: 4}", "requests: 4, requests_per_stream: 2}")
    assert messages(both) == ["s.yaml:7: measurements.sweep: give requests or "
                              "requests_per_stream, not both"]


def test_nothing_to_measure():
    text = VALID.replace("  single_stream: {requests: 2, output_tokens: 16}\n",
                         "  single_stream: {enabled: false}\n"
                         ).replace("requests: 4}", "requests: 4, enabled: false}")
    assert messages(text) == ["s.yaml:6: measurements: nothing to measure; add single_stream, "
                              "fixed_length, sweep, fidelity or knee"]


def test_every_problem_at_once_in_line_order():
    text = (VALID.replace("price_per_hour: 1.1267", "price_per_hour: -1")
            .replace("label: qat", "label: bf16-a")
            .replace("requests: 2,", "requets: 2,")
            .replace("concurrency: [1, 4]", "concurrency: []"))
    lines = [m.split(":")[1] for m in messages(text)]
    assert lines == ["4", "6", "7", "13"]


def test_invalid_yaml_and_duplicate_keys():
    assert messages("name: [unclosed\n")[0].startswith("s.yaml:2: not valid YAML: ")
    text = VALID.replace("  instance_type: ml.g6.xlarge\n",
                         "  instance_type: ml.g6.xlarge\n  instance_type: ml.g5.xlarge\n")
    assert messages(text) == ["s.yaml:4: hardware: duplicate key 'instance_type' (first given "
                              "on line 3)"]
    assert messages("") == ["s.yaml:1: the file is empty; see scenarios/demo-simulated.yaml "
                            "for an example"]
    assert messages("- a\n- b\n") == ["s.yaml:1: the file must be a mapping of settings, "
                                      "got a list"]


def test_simulator_profiles_are_checked():
    text = VALID + textwrap.dedent("""\
        simulate:
          profiles:
            bf16: {preset: l4-bf15}
            qat: {preset: l4-qat-w4a16, itl_s: fast}
        """)
    result = messages(text)
    assert result[0].startswith("s.yaml:18: simulate.profiles.bf16: unknown preset 'l4-bf15'; "
                                "choose one of ")
    assert "l4-bf16" in result[0] and "t4-qat-w4a16" in result[0]
    assert result[1] == "s.yaml:19: simulate.profiles.qat.itl_s must be a number, got the text 'fast'"
    missing = VALID + "simulate:\n  profiles:\n    bf16: {preset: l4-bf16}\n"
    assert messages(missing) == ["s.yaml:14: phases[1]: no simulator profile for checkpoint "
                                 "'qat': add simulate.profiles.qat"]


# --------------------------------------------------------------------------- parameters


def test_parameters_come_from_params_then_environment_with_defaults():
    text = (VALID.replace("price_per_hour: 1.1267", "price_per_hour: ${PRICE}")
            .replace("http://127.0.0.1:8000", "${URL:-http://127.0.0.1:9}")
            .replace("model: m", "model: '${MODEL}'"))
    env = {"PRICE": "0.35", "MODEL": "from-env", "URL": ""}
    scenario = check(text, given={"MODEL": "from-param"}, environ=env).scenario
    assert scenario.hardware.price_per_hour == 0.35  # a plain scalar is typed after substitution
    assert scenario.phase("bf16-a").model == "from-param"  # --param beats the environment
    assert scenario.phase("bf16-a").target.url == "http://127.0.0.1:9"  # empty -> default


def test_a_missing_parameter_is_one_clear_problem_on_its_line():
    text = VALID.replace("price_per_hour: 1.1267", "price_per_hour: ${T4_PRICE}")
    assert messages(text) == ["s.yaml:4: parameter ${T4_PRICE} is not set: export T4_PRICE=... "
                              "or pass --param T4_PRICE=..."]


def test_lenient_checks_turn_missing_parameters_into_warnings():
    text = VALID.replace("price_per_hour: 1.1267", "price_per_hour: ${T4_PRICE}")
    checked = check(text, lenient=True)
    assert checked.problems == [] and checked.scenario.hardware.price_per_hour is None
    assert [w.line for w in checked.warnings] == [4]


def test_a_bad_substituted_value_says_where_it_came_from():
    text = VALID.replace("price_per_hour: 1.1267", "price_per_hour: ${PRICE}")
    assert messages(text, environ={"PRICE": "-3"}) == [
        "s.yaml:4: hardware.price_per_hour must be a positive number of dollars per hour "
        "(e.g. 1.1267), got -3 (from '${PRICE}')"]


def test_substitute_escapes_and_bad_names():
    params = Params({"A": "1"}, {})
    assert substitute("x$${A}y${A}", params) == ("x${A}y1", [])
    text, problems = substitute("${1X}", params)
    assert text == "${1X}" and "bad parameter reference" in problems[0]
    assert params.used == {"A"}
    assert Params({"UNUSED": "1"}, {}).unused_given() == ["UNUSED"]


def test_param_options_parse_and_reject_garbage():
    assert parse_param_options(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(ConfigError, match="--param takes KEY=VALUE"):
        parse_param_options(["no-equals"])


def test_yaml_merge_keys_share_a_deploy_block_and_own_keys_win():
    text = textwrap.dedent("""\
        name: s
        hardware: {instance_type: ml.g6.xlarge, region: us-east-2}
        measurements: {fidelity: {seed: 1}}
        phases:
          - label: a
            checkpoint: bf16
            model: google/gemma-4-E2B-it
            deploy: &deploy {image: img, role: arn, env: {SM_VLLM_MAX_MODEL_LEN: 8192}}
          - label: b
            checkpoint: qat
            model: google/gemma-4-E2B-it-qat-w4a16-ct
            deploy:
              <<: *deploy
              instance_type: ml.g5.xlarge
        """)
    scenario = check(text).scenario
    a, b = scenario.phases
    assert a.deploy.model_id == "google/gemma-4-E2B-it"  # from the phase's model
    assert b.deploy.model_id == "google/gemma-4-E2B-it-qat-w4a16-ct"
    assert a.deploy.instance_type == "ml.g6.xlarge"  # from hardware
    assert b.deploy.instance_type == "ml.g5.xlarge"  # own key beats the merged one
    assert b.deploy.env == {"SM_VLLM_MAX_MODEL_LEN": "8192"}  # env values become text
    assert b.deploy.region == "us-east-2"


def test_phase_selection():
    scenario = check(VALID).scenario
    assert [p.label for p in scenario.select(["qat", "bf16-a"])] == ["bf16-a", "qat"]
    with pytest.raises(ConfigError, match="no phase labelled 'bf16-b'; this scenario has bf16-a, qat"):
        scenario.select(["bf16-b"])


# --------------------------------------------------------------------------- files and CLI


def test_shipped_scenarios_are_valid():
    demo = load_scenario(SCENARIOS / "demo-simulated.yaml", environ={})
    assert [p.checkpoint for p in demo.phases] == ["bf16", "qat-w4a16", "bf16"]
    l4 = load_scenario(SCENARIOS / "l4-sagemaker-gemma4-e2b.yaml",
                       {"SAGEMAKER_VLLM_IMAGE": "img", "SAGEMAKER_ROLE_ARN": "arn"}, environ={})
    assert l4.hardware.instance_type == "ml.g6.xlarge" and l4.hardware.region == "us-east-2"
    assert l4.hardware.price_per_hour == 1.1267
    assert [p.deploy.model_id for p in l4.phases] == [
        "google/gemma-4-E2B-it", "google/gemma-4-E2B-it-qat-w4a16-ct", "google/gemma-4-E2B-it"]
    assert l4.measurements.sweep.concurrency == (1, 4, 16)
    assert l4.measurements.fixed_length.output_tokens == 512
    t4 = load_scenario(SCENARIOS / "t4-vllm-gemma4-e2b.yaml",
                       {"T4_PRICE_PER_HOUR": "0.54", "T4_HOST": "me@vm"}, environ={})
    assert t4.hardware.price_per_hour == 0.54
    assert [(p.server.model, p.server.host, p.server.port) for p in t4.phases] == [
        ("google/gemma-4-E2B-it", "me@vm", 8000),
        ("google/gemma-4-E2B-it-qat-w4a16-ct", "me@vm", 8000),
        ("google/gemma-4-E2B-it", "me@vm", 8000)]
    assert t4.phases[0].server.command[:3] == ("vllm", "serve", "{model}")
    local = load_scenario(SCENARIOS / "t4-vllm-gemma4-e2b.yaml", {"T4_PRICE_PER_HOUR": "0.54"},
                          environ={})
    assert all(p.server.host is None for p in local.phases)  # T4_HOST unset: this machine
    with pytest.raises(ScenarioError) as info:
        load_scenario(SCENARIOS / "t4-vllm-gemma4-e2b.yaml", environ={})
    assert len(info.value.problems) == 1  # the price, no follow-on type errors


def test_check_file_hashes_the_file_and_reports_unreadable_ones(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(VALID)
    checked = check_file(path, environ={})
    assert len(checked.scenario.sha256) == 64 and checked.scenario.path == str(path)
    with pytest.raises(ConfigError, match="no such scenario file"):
        check_file(tmp_path / "nope.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        check_file(tmp_path / "bin.yaml")


def test_cli_validate_prints_every_problem_and_exits_non_zero(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(VALID.replace("price_per_hour: 1.1267", "price_per_hour: -1")
                    .replace("label: qat", "label: bf16-a"))
    result = CliRunner().invoke(cli, ["scenario", "validate", str(path)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{path}:4: hardware.price_per_hour must be")
    assert lines[1].startswith(f"{path}:13: phases[1]: duplicate phase label")
    assert len(lines) == 2


def test_cli_validate_describes_a_good_file(tmp_path):
    result = CliRunner().invoke(cli, ["scenario", "validate", str(SCENARIOS / "demo-simulated.yaml"),
                                      "--param", "NOT_USED=1"])
    assert result.exit_code == 0, result.output
    assert "phases: bf16-a (bf16) -> qat (qat-w4a16) -> bf16-b (bf16)" in result.stdout
    assert "warning: --param NOT_USED is not used" in result.stderr
    missing = CliRunner().invoke(cli, ["scenario", "validate", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "no such scenario file" in missing.output
