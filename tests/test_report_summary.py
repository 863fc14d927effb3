"""build_summary: every number of the report, from the L4 study's A-B-A phases."""

from __future__ import annotations

import copy
import json

import pytest

from loadgen.report.drift import VERDICT_DRIFT, VERDICT_OK
from loadgen.report.html import render_html
from loadgen.report.markdown import render_markdown
from loadgen.report.summary import build_summary, ordered_phases
from tests.helpers.report_fixtures import L4_PRICE, l4_study, make_level


@pytest.fixture(scope="module")
def study():
    return l4_study()


def _summary(phases, **kw):
    kw.setdefault("price_per_hour", L4_PRICE)
    return build_summary(phases, **kw)


def test_phases_roles_and_names(study):
    summary = _summary(study[::-1])  # file order must not matter: order_index decides
    assert [p["name"] for p in summary["phases"]] == ["bf16 #1", "qat", "bf16 #2"]
    assert summary["roles"] == {"baseline": "bf16 #1", "candidate": "qat",
                                "baseline_repeat": "bf16 #2"}
    assert summary["simulated"] is False
    json.dumps(summary)  # machine-readable as it is


def test_cost_per_level_matches_the_l4_table(study):
    summary = _summary(study)
    costs = {(p["name"], lv["label"]): round(lv["cost_per_million_output_tokens"], 2)
             for p in summary["phases"] for lv in p["levels"]}
    assert costs[("bf16 #1", "concurrency 1")] == 6.86
    assert costs[("qat", "concurrency 1")] == 3.67
    assert costs[("bf16 #1", "concurrency 4")] == 1.82
    assert costs[("qat", "concurrency 4")] == 0.95
    assert costs[("bf16 #1", "concurrency 16")] == 0.51
    assert costs[("qat", "concurrency 16")] == 0.29
    assert summary["run"]["price_per_hour"] == L4_PRICE
    no_price = build_summary(study)
    assert no_price["phases"][0]["levels"][0]["cost_per_million_output_tokens"] is None


def test_b_over_a_ratios_and_confidence_interval(study):
    comparison = _summary(study)["comparison"]
    assert (comparison["baseline"], comparison["candidate"]) == ("bf16 #1", "qat")
    decode = comparison["single_stream_decode"]
    assert decode["ratio"] == pytest.approx(2.05, abs=0.02)
    assert decode["ci"]["low"] < decode["ratio"] < decode["ci"]["high"]
    assert decode["ci"]["n_a"] == 5  # one sample per single-stream request (histogram)
    assert decode["verdict"] == "b_better"  # 2× with an interval far beyond ±5 %
    assert decode["text"].startswith("qat faster by 10")
    fixed = comparison["fixed_length"]
    assert fixed["ratio"] == pytest.approx(5.4633 / 10.5767, abs=1e-3)
    # Three repeats: no bootstrap interval from so few, and the report says so.
    assert fixed["ci"]["n_a"] == 3 and fixed["ci"]["low"] is None
    assert fixed["verdict"] == "inconclusive"
    assert "inconclusive: n too small (n=3/3; need ≈ " in render_markdown(_summary(study))
    at16 = comparison["levels"][2]["metrics"]
    assert at16["output_tokens_per_s"]["ratio"] == pytest.approx(1077.25 / 619.1)
    assert round(at16["cost_per_million_output_tokens"]["b"], 2) == 0.29
    fid = comparison["fidelity"]
    assert (fid["score_a"], fid["score_b"], fid["identical"]) == (37, 37, 35)


def test_drift_within_tolerance_for_the_l4_numbers(study):
    drift = _summary(study)["drift"]
    assert drift["phases"] == ["bf16 #1", "bf16 #2"]
    assert drift["verdict"] == VERDICT_OK and drift["ok"] is True
    by_metric = {m["metric"]: m for m in drift["metrics"]}
    decode = by_metric["decode_tokens_per_s"]
    assert decode["primary"] and decode["state"] == "within" and decode["n"] == [125, 125]
    assert drift["effect"]["ratio"] == pytest.approx(2.05, abs=0.03)
    assert "the difference is the checkpoint" in drift["sentence"]


def test_drift_detected_when_the_repeat_moves(study):
    """The repeat's server 13 % slower at concurrency 16 (its throughput and its requests'
    e2e times): drift on the pooled throughput."""
    phases = copy.deepcopy(study)
    slow = make_level(16, 540.0, 51.5 * 0.96 * 0.96 / 1.15, seed=2)
    phases[2]["measurements"]["sweep"][2] = slow
    drift = _summary(phases)["drift"]
    assert drift["verdict"] == VERDICT_DRIFT and drift["ok"] is False
    bad = [(m["level"], m["metric"]) for m in drift["metrics"] + drift["levels"]
           if m["state"] == "drift"]
    assert ("concurrency 16", "output_tokens_per_s") in bad
    assert _summary(phases, drift_tolerance=0.2)["drift"]["ok"] is True


def test_without_a_repeat_drift_is_not_measured(study):
    summary = _summary(study[:2])
    assert summary["drift"]["ok"] is None
    assert summary["drift"]["verdict"].startswith("not measured")
    single = _summary(study[:1])
    assert single["comparison"] is None


def test_deployment_facts_side_by_side_without_secrets(study):
    phases = copy.deepcopy(study)
    phases[0]["server"]["hf_token"] = "hf_SECRET"
    phases[0]["server"]["endpoint"] = {"name": "bf16-ep", "aws_secret_access_key": "SECRET"}
    phases[0]["target"]["api_key"] = "sk-SECRET"
    summary = _summary(phases)
    rows = {row["key"]: row for row in summary["deployment"]}
    assert rows["model_load_gib"]["values"] == [9.75, 8.01, 9.75]
    assert rows["model_load_gib"]["label"] == "model weights (GiB)"
    assert rows["kv_cache_tokens"]["values"] == [723484, 867999, 723484]
    assert rows["endpoint.name"]["values"] == ["bf16-ep", None, None]
    assert "SECRET" not in json.dumps(summary)


def test_simulated_and_partial_flags_propagate(study):
    phases = copy.deepcopy(study)
    phases[1]["simulated"] = True
    phases[2]["partial"] = True
    summary = _summary(phases)
    assert summary["simulated"] is True
    assert [p["simulated"] for p in summary["phases"]] == [False, True, False]
    assert summary["run"]["partial"] is True


def test_run_metadata(study):
    info = {"scenario": "l4-sagemaker-gemma4-e2b", "scenario_sha256": "ab" * 32,
            "instance_type": "ml.g6.xlarge", "region": "us-east-2", "price_per_hour": L4_PRICE}
    run = build_summary(study, run_info=info)["run"]
    assert run["scenario_sha256"] == "ab" * 32 and run["price_per_hour"] == L4_PRICE
    assert run["started_at"] == "2025-05-01T10:00:00+00:00"
    assert run["finished_at"] == "2025-05-01T10:55:00+00:00"
    assert run["loadgen_versions"] == ["0.1.0"] and run["report_loadgen_version"]


def test_plain_sweep_results_are_summarised_too():
    """A `loadgen sweep` results file: no phase, no measurements, just levels."""
    plain = {"loadgen_version": "0.1.0", "target": {"url": "http://127.0.0.1:8000",
                                                    "model": "m"},
             "started_at": "t0", "partial": False, "simulated": True,
             "levels": [make_level(1, 40.0, 45.0), make_level(4, 150.0, 42.0)]}
    summary = build_summary([plain], price_per_hour=2.0)
    phase = summary["phases"][0]
    assert phase["name"] == "m" and phase["single_stream"] is None
    assert [lv["label"] for lv in phase["levels"]] == ["concurrency 1", "concurrency 4"]
    assert phase["levels"][1]["cost_per_million_output_tokens"] == pytest.approx(
        2.0 / (150.0 * 3600) * 1e6)
    assert summary["simulated"] is True


def test_ordered_phases_names_repeats():
    phases = [{"phase": {"label": "x", "order_index": 1}, "levels": []},
              {"phase": {"label": "x", "order_index": 0}, "levels": []},
              {"levels": [], "target": {"model": "y"}}]
    names = [name for name, _, _ in ordered_phases(phases, ["a.json", "b.json", "c.json"])]
    files = [file for _, _, file in ordered_phases(phases, ["a.json", "b.json", "c.json"])]
    assert names == ["x #1", "x #2", "y"] and files == ["b.json", "a.json", "c.json"]


def test_a_failed_phase_is_reported_with_what_it_measured(study):
    phases = copy.deepcopy(study)
    failed = phases[1]
    failed["phase"].update(status="failed", error="endpoint went to Failed: out of memory")
    failed["partial"] = True
    failed["measurements"]["sweep"] = failed["measurements"]["sweep"][:1]
    failed["levels"] = failed["measurements"]["sweep"]
    failed["measurements"]["fixed_length"] = None
    summary = _summary(phases)
    qat = summary["phases"][1]
    assert (qat["status"], qat["error"]) == ("failed", "endpoint went to Failed: out of memory")
    assert [lv["label"] for lv in qat["levels"]] == ["concurrency 1"]
    assert summary["comparison"]["fixed_length"] is None
    assert [row["label"] for row in summary["comparison"]["levels"]] == ["concurrency 1"]
    text = render_markdown(summary)
    assert "- qat: endpoint went to Failed: out of memory" in text
    assert ("| qat | google/gemma-4-E2B-it-qat-w4a16-ct | sagemaker "
            "https://runtime.sagemaker.us-east-2.amazonaws.com |") in text


def test_roles_follow_the_checkpoint_when_labels_are_unique(study):
    """Scenario files label A-B-A phases bf16-a, qat, bf16-b; A₂ shares A₁'s checkpoint."""
    phases = copy.deepcopy(study)
    for phase, label in zip(phases, ("bf16-a", "qat", "bf16-b")):
        phase["phase"]["label"] = label
        phase["phase"]["checkpoint"] = label[:4]
    note = "time scale 10: absolute numbers are 10x off"
    summary = _summary(phases, run_info={"name": "demo-simulated", "simulation_note": note})
    assert summary["roles"] == {"baseline": "bf16-a", "candidate": "qat",
                                "baseline_repeat": "bf16-b"}
    assert summary["drift"]["phases"] == ["bf16-a", "bf16-b"] and summary["drift"]["ok"]
    text = render_markdown(summary)
    assert text.startswith("# loadgen report: demo-simulated\n")
    assert f"> **{note}**" not in text  # the note is shown only when the data is simulated
    phases[0]["simulated"] = True
    simulated = render_markdown(_summary(phases, run_info={"simulation_note": note}))
    banner = [line for line in simulated.splitlines() if "SIMULATED" in line]
    assert len(banner) == 1 and banner[0].startswith("> **SIMULATED: ") and note in banner[0]


def test_p99_from_fewer_than_100_samples_is_flagged(study):
    text = render_markdown(_summary(study))
    levels = text[text.index("## Per load level"):]
    levels = levels[levels.index("concurrency 1"):]
    rows = {line.split("|")[1].strip(): line for line in levels.splitlines()
            if line.startswith("| TTFT")}
    assert rows["TTFT p99 ms"].split("|")[2].strip().endswith("†")
    assert not rows["TTFT p50 ms"].split("|")[2].strip().endswith("†")
    assert "† fewer than 100 samples" in levels


def test_phases_table_names_instance_and_price_in_markdown_and_html(study):
    """What was compared: checkpoint, target, instance type and price per phase."""
    phases = copy.deepcopy(study)
    phases[1]["server"]["instance_type"] = "ml.g6.2xlarge"  # the deployment's own instance
    info = {"instance_type": "ml.g6.xlarge", "price_per_hour": L4_PRICE}
    summary = build_summary(phases, run_info=info)
    text = render_markdown(summary)
    table = text[text.index("## Phases"):]
    table = table[:table.index("\n## ")]
    header, _, *rows = [line for line in table.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    columns = [c.strip() for c in header.strip("|").split("|")]
    instance, price = columns.index("instance"), columns.index("price $/h")
    assert columns.index("checkpoint") < instance
    assert [row[instance] for row in cells] == ["ml.g6.xlarge", "ml.g6.2xlarge", "ml.g6.xlarge"]
    assert {row[price] for row in cells} == {"1.1267"}  # as given, not rounded
    assert "Instance: ml.g6.xlarge, ml.g6.2xlarge. Price: $1.1267/h." in text

    page = render_html(summary)
    section = page[page.index('<section id="phases">'):]
    section = section[:section.index("</section>")]
    assert "<th>instance</th><th>price $/h</th>" in section
    assert ('<td>ml.g6.2xlarge</td><td class="num">1.1267</td>' in section
            and section.count("<td>ml.g6.xlarge</td>") == 2)


def test_phases_table_without_instance_or_price_says_so(study):
    text = render_markdown(build_summary(study))
    row = next(line for line in text[text.index("## Phases"):].splitlines()
               if line.startswith("| qat"))
    assert "| – | – |" in row
