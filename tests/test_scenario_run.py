"""``loadgen scenario run``: phases in order, one file each, failures kept, resume, reports.

The end-to-end test runs the shipped demo (``scripts/demo.sh`` -> ``loadgen scenario run
--simulate``) once per module, sped up with ``--time-scale``; the others use small
scenarios against the quick simulator of ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.engine import RunControl
from loadgen.errors import ConfigError
from loadgen.scenario import RunOptions, load_scenario, run_scenario

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

ROOT = Path(__file__).resolve().parent.parent
LOADGEN = Path(sys.executable).with_name("loadgen")


# --------------------------------------------------------------------------- end to end


# The demo file's own speed-up. Faster runs make a simulated token interval a fraction of a
# millisecond (0.24 ms for QAT at 40×), where a busy 2-core box's scheduling noise, not the
# calibrated profiles, decides the decode ratio; at 10× the single-stream decode spans are
# ~0.12 s (QAT) and ~0.25 s (bf16), long enough for a stall to move the ratio only a little.
TIME_SCALE = 10


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """The demo study, simulated, through the shell script and the installed CLI."""
    out = tmp_path_factory.mktemp("demo") / "out"
    env = {**os.environ, "LOADGEN": str(LOADGEN), "OUT_DIR": str(out)}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"),
                           "--time-scale", str(TIME_SCALE)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out, done


def test_demo_writes_every_report_and_phase_file(demo_dir):
    out, done = demo_dir
    names = sorted(p.name for p in out.iterdir() if p.is_file())
    assert {"report.md", "report.html", "summary.json", "phase-bf16-a.json", "phase-qat.json",
            "phase-bf16-b.json"} <= set(names)
    assert f"report: {out}/report.html" in done.stdout
    assert "SIMULATED" in done.stderr
    # The run ends with its answer: the headline, then the drift verdict (issue 18).
    *_, headline, verdict = done.stderr.strip().splitlines()
    assert headline.startswith("qat decodes ") and " as fast as bf16-a " in headline
    assert verdict.startswith("A-B-A drift: ")


def test_phase_files_hold_the_measurements_in_study_order(demo_dir):
    out, _ = demo_dir
    phases = [json.loads((out / f"phase-{label}.json").read_text())
              for label in ("bf16-a", "qat", "bf16-b")]
    assert [p["phase"]["order_index"] for p in phases] == [0, 1, 2]
    assert [p["phase"]["checkpoint"] for p in phases] == ["bf16", "qat-w4a16", "bf16"]
    for data in phases:
        assert data["phase"]["status"] == "complete" and data["partial"] is False
        assert data["simulated"] is True and data["simulation"]["time_scale"] == TIME_SCALE
        m = data["measurements"]
        assert m["single_stream"]["requests"]["completed"] == 8
        assert data["workload"]["paired"] is True and data["workload"]["seed"] == 0
        assert m["fixed_length"]["tokens"] == 256 and len(m["fixed_length"]["e2e_s"]) == 2
        assert m["fixed_length"]["min_s"] <= m["fixed_length"]["max_s"]
        assert [lv["load"]["concurrency"] for lv in m["sweep"]] == [1, 4, 16]
        assert data["levels"] == m["sweep"]
        assert [lv["requests"]["completed"] for lv in m["sweep"]] == [2, 8, 32]
        assert data["fidelity"]["total"] == 40
        assert data["server"]["kv_cache_tokens"] > 700_000  # from the simulator's /metrics
        assert data["scenario"]["name"] == "demo-simulated"
    # Same checkpoint, same (simulated) answers; the QAT responder slips elsewhere.
    answers = [[a["response"] for a in p["fidelity"]["answers"]] for p in phases]
    assert answers[0] == answers[2] != answers[1]


def test_calibrated_profiles_give_the_published_decode_ratio(demo_dir):
    out, _ = demo_dir
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"] is True
    assert summary["roles"] == {"baseline": "bf16-a", "candidate": "qat",
                                "baseline_repeat": "bf16-b"}
    ratio = summary["comparison"]["single_stream_decode"]["ratio"]
    assert 1.7 < ratio < 2.4  # 105.1 / 51.3 = 2.05 in the profiles; loose: shared CPU
    assert summary["drift"]["phases"] == ["bf16-a", "bf16-b"]
    assert f"time_scale {TIME_SCALE}" in summary["run"]["simulation_note"]
    assert summary["run"]["price_per_hour"] == 1.1267
    report = (out / "report.md").read_text()
    assert "SIMULATED" in report and "bf16-b" in report


def test_resume_skips_complete_phases_and_rebuilds_the_reports(demo_dir):
    out, _ = demo_dir
    before = (out / "phase-qat.json").read_bytes()
    (out / "report.md").unlink()
    result = CliRunner().invoke(cli, ["scenario", "run", str(ROOT / "scenarios/demo-simulated.yaml"),
                                      "--simulate", "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("skipped (--resume)") == 3
    assert (out / "phase-qat.json").read_bytes() == before
    assert (out / "report.md").exists()


def test_an_earlier_run_is_never_overwritten(demo_dir):
    out, _ = demo_dir
    result = CliRunner().invoke(cli, ["scenario", "run", str(ROOT / "scenarios/demo-simulated.yaml"),
                                      "--simulate", "--out", str(out)])
    assert result.exit_code == 2
    assert "already holds phase-bf16-a.json from an earlier run; pass --resume" in result.output


# --------------------------------------------------------------------------- failures, order


def small_scenario(tmp_path: Path, middle_url: str = "${MIDDLE_URL}") -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: small
        hardware: {{instance_type: test-box, price_per_hour: 2.0}}
        request: {{input_tokens: 8, connect_timeout: 2}}
        measurements:
          single_stream: {{requests: 2, output_tokens: 8, warmup: 0}}
          fixed_length: {{output_tokens: 16, repeats: 2}}
          sweep: {{concurrency: [1, 2], requests_per_stream: 2, output_tokens: 8}}
          fidelity: {{enabled: false}}
        phases:
          - {{label: a1, checkpoint: a, target: "${{SIM_URL}}"}}
          - {{label: b, checkpoint: b, target: "{middle_url}"}}
          - {{label: a2, checkpoint: a, target: "${{SIM_URL}}"}}
        """))
    return path


def run(path: Path, out: Path, params: dict, control: RunControl | None = None,
        log=None, **options):
    scenario = load_scenario(path, params, environ={})
    messages: list[str] = []
    result = asyncio.run(run_scenario(scenario, RunOptions(out, **options), control=control,
                                      log=log or messages.append))
    return result, messages


def test_a_failing_phase_is_recorded_and_the_others_still_run(tmp_path, sim_url):
    path = small_scenario(tmp_path)
    params = {"SIM_URL": sim_url, "MIDDLE_URL": "http://127.0.0.1:9"}  # nothing listens there
    result, messages = run(path, tmp_path / "out", params)
    assert [(o.label, o.status) for o in result.outcomes] == [
        ("a1", "complete"), ("b", "failed"), ("a2", "complete")]
    assert not result.ok
    failed = json.loads((tmp_path / "out" / "phase-b.json").read_text())
    assert failed["phase"]["status"] == "failed" and failed["partial"] is True
    assert "127.0.0.1:9" in failed["phase"]["error"]
    first = json.loads((tmp_path / "out" / "phase-a1.json").read_text())
    assert first["measurements"]["fixed_length"]["repeats"] == 2
    assert [lv["requests"]["completed"] for lv in first["measurements"]["sweep"]] == [2, 4]
    assert any(m.startswith("[b] failed: ") for m in messages)
    assert (tmp_path / "out" / "report.md").exists()  # reports from what was measured
    # The phases ran in file order: each started after the previous one finished.
    times = [json.loads((tmp_path / "out" / f"phase-{x}.json").read_text())
             for x in ("a1", "b", "a2")]
    assert times[0]["finished_at"] <= times[1]["started_at"] <= times[2]["started_at"]

    # --resume: the complete phases are kept; the failed one runs again (now reachable).
    result, messages = run(path, tmp_path / "out", {**params, "MIDDLE_URL": sim_url},
                           resume=True)
    assert [(o.label, o.status) for o in result.outcomes] == [
        ("a1", "skipped"), ("b", "complete"), ("a2", "skipped")]
    assert result.ok and result.summary["roles"]["candidate"] == "b"
    assert json.loads((tmp_path / "out" / "phase-a1.json").read_text()) == first


def test_only_the_selected_phases_run(tmp_path, sim_url):
    path = small_scenario(tmp_path, middle_url="${SIM_URL}")
    result, _ = run(path, tmp_path / "out", {"SIM_URL": sim_url}, phases=["a2", "b"])
    assert [o.label for o in result.outcomes] == ["b", "a2"]  # file order, not option order
    assert not (tmp_path / "out" / "phase-a1.json").exists()


def test_stopping_keeps_what_was_measured_and_runs_no_further_phase(tmp_path, sim_url):
    path = small_scenario(tmp_path, middle_url="${SIM_URL}")
    control = RunControl()
    seen: list[str] = []

    def log(message: str) -> None:
        seen.append(message)
        if message.startswith("[a1] single stream"):
            control.stop()  # what the Ctrl-C handler does

    result, _ = run(path, tmp_path / "out", {"SIM_URL": sim_url}, control=control, log=log)
    assert result.interrupted and [(o.label, o.status) for o in result.outcomes] == [
        ("a1", "interrupted")]
    data = json.loads((tmp_path / "out" / "phase-a1.json").read_text())
    assert data["phase"]["status"] == "interrupted"
    assert data["measurements"]["single_stream"]["requests"]["completed"] == 2
    assert data["measurements"]["fixed_length"] is None
    assert not (tmp_path / "out" / "phase-b.json").exists()


def test_simulate_needs_a_profile_per_checkpoint(tmp_path, sim_url):
    path = small_scenario(tmp_path, middle_url="${SIM_URL}")
    result, _ = run(path, tmp_path / "out", {"SIM_URL": sim_url}, simulate=True)
    assert {o.status for o in result.outcomes} == {"failed"}
    assert "no simulator profile for checkpoint 'a'" in result.outcomes[0].error


def test_cli_run_reports_file_problems_and_bad_options(tmp_path):
    path = small_scenario(tmp_path)
    result = CliRunner().invoke(cli, ["scenario", "run", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert f"{path}:10: parameter ${{SIM_URL}} is not set" in result.stderr
    assert "has 3 problem(s)" in result.stderr
    result = CliRunner().invoke(cli, ["scenario", "run", str(ROOT / "scenarios/demo-simulated.yaml"),
                                      "--time-scale", "2"])
    assert result.exit_code == 2 and "--time-scale needs --simulate" in result.output
    result = CliRunner().invoke(cli, ["scenario", "run", str(ROOT / "scenarios/demo-simulated.yaml"),
                                      "--simulate", "--phases", "nope"])
    assert result.exit_code == 2 and "no phase labelled 'nope'" in result.output


def test_deploying_scenarios_ask_first(tmp_path):
    """Without --yes and without a terminal, a run that would deploy stops before any AWS call."""
    result = CliRunner().invoke(cli, [
        "scenario", "run", str(ROOT / "scenarios/l4-sagemaker-gemma4-e2b.yaml"),
        "--out", str(tmp_path / "o"), "--param", "SAGEMAKER_VLLM_IMAGE=img",
        "--param", "SAGEMAKER_ROLE_ARN=arn"])
    assert result.exit_code == 2
    assert "deploys 3 SageMaker endpoint(s)" in result.output and "pass --yes" in result.output
    assert not (tmp_path / "o").exists()


def test_run_options_validate_the_directory(tmp_path, sim_url):
    path = small_scenario(tmp_path, middle_url="${SIM_URL}")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "phase-b.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds phase-b.json"):
        run(path, tmp_path / "out", {"SIM_URL": sim_url})
