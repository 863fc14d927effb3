"""Comparisons: fidelity mismatches, B/A ratios with intervals and verdicts, CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from loadgen.cli.report import compare as compare_command
from loadgen.errors import ConfigError
from loadgen.fidelity import ARITHMETIC, FidelityResult, Question, score_response
from loadgen.report.compare import (
    compare_fidelity,
    compare_levels,
    compare_runs,
    mismatch_line,
    ratio,
)
from loadgen.report.compare_text import format_comparison
from tests.helpers.report_fixtures import (
    BF16_SEED,
    QAT_SEED,
    l4_study,
    make_fidelity,
    write_study,
)


def _one_question_run(response: str) -> FidelityResult:
    question = Question("arith-01", ARITHMETIC, "876 + 608 - 558",
                        "What is 876 + 608 - 558? Answer with just the number.", "926")
    return FidelityResult(0, (score_response(question, response),))


def test_mismatch_line_says_who_was_right():
    result = compare_fidelity(_one_question_run("1026"), _one_question_run("The answer is 926."),
                              ("bf16", "QAT"))
    assert result["identical"] == 0 and len(result["mismatches"]) == 1
    assert mismatch_line(result["mismatches"][0], result["labels"]) == \
        "876 + 608 - 558 (expected 926): bf16 1026 ✗, QAT 926 ✓"


def test_fidelity_comparison_of_two_runs_that_differ():
    a = FidelityResult.from_dict(make_fidelity(BF16_SEED))
    b = FidelityResult.from_dict(make_fidelity(QAT_SEED))
    result = compare_fidelity(a, b, ("bf16", "qat"))
    assert (result["score_a"], result["score_b"], result["total"]) == (37, 37, 40)
    assert result["identical"] == 35
    assert len(result["mismatches"]) == 5
    for m in result["mismatches"]:
        assert m["category"] == ARITHMETIC
        assert m["a"]["response"] != m["b"]["response"]
        # Exactly one verdict per side, and it matches the expected answer.
        for side in (m["a"], m["b"]):
            assert side["correct"] == (side["extracted"] == m["expected"])
    # A run compared with itself matches everywhere.
    assert compare_fidelity(a, a)["identical"] == 40


def test_failed_responses_never_count_as_identical():
    question = _one_question_run("926").answers[0].question
    failed = FidelityResult(0, (score_response(question, None, "timeout: slow"),))
    result = compare_fidelity(failed, failed, ("a", "b"))
    assert result["identical"] == 0
    assert "a [timeout: slow] ✗" in mismatch_line(result["mismatches"][0], ("a", "b"))


def test_different_suites_cannot_be_compared():
    with pytest.raises(ConfigError, match="same fidelity seed"):
        compare_fidelity(FidelityResult.from_dict(make_fidelity(8, suite_seed=0)),
                         FidelityResult.from_dict(make_fidelity(8, suite_seed=1)))


def test_ratio_helpers():
    assert ratio(51.3, 105.1) == pytest.approx(2.0487, abs=1e-4)
    assert round(105.1 / 51.3, 2) == 2.05
    assert ratio(0, 5) is None and ratio(None, 5) is None


def test_level_ratios_match_levels_by_load():
    bf16, qat, _ = l4_study()
    rows = compare_levels(bf16["levels"], qat["levels"][::-1])  # order must not matter
    assert [r["label"] for r in rows] == ["concurrency 1", "concurrency 4", "concurrency 16"]
    at16 = rows[2]["metrics"]["output_tokens_per_s"]
    assert (at16["a"], at16["b"]) == (619.1, 1077.25)
    assert at16["ratio"] == pytest.approx(1077.25 / 619.1)
    # ITL halves with QAT in the fixture: the latency ratio is below 1.
    assert rows[0]["metrics"]["itl_ms_p50"]["ratio"] < 0.6
    assert compare_levels(bf16["levels"][:1], qat["levels"][1:]) == []


def test_compare_runs_text(tmp_path):
    bf16, qat, _ = l4_study()
    result = compare_runs(bf16, qat, ("bf16", "qat"))
    text = format_comparison(result)
    assert "bf16: 37/40 correct, qat: 37/40 correct" in text
    assert "identical responses (character for character): 35/40" in text
    assert text.count("(expected ") == 5
    assert "SIMULATED" not in text
    # Three repeats: no interval, and the verdict says how many would decide.
    assert "fixed-length generation: mean 10.58 s → 5.46 s (0.52×; inconclusive: n too " \
        "small (n=3/3; need ≈ " in text
    assert "1,077.25" in text and "1.74× [" in text
    assert result["single_stream"]["metrics"]["decode_tokens_per_s"]["ratio"] == \
        pytest.approx(2.05, abs=0.02)


def test_long_labels_keep_the_columns_apart():
    bf16, qat, _ = l4_study()
    labels = ("gemma-4-e2b-it-bf16-run1", "gemma-4-e2b-it-qat-w4a16-run1")
    text = format_comparison(compare_runs(bf16, qat, labels))
    header = next(line for line in text.splitlines() if line.strip().startswith("metric"))
    assert header.split() == ["metric", labels[0], labels[1], f"{labels[1]}/{labels[0]}",
                              "[95%", "CI]", "verdict"]
    row = next(line for line in text.splitlines() if line.strip().startswith("output tok/s"))
    # numbers right-aligned under their headers, the verdict after them
    assert len(row[:header.index("  verdict")]) == len(header[:header.index("  verdict")])
    assert row[header.index("  verdict"):].startswith("  gemma-4-e2b-it-qat-w4a16-run1 faster")


def test_every_metric_gets_a_verdict_and_a_repeat_is_no_practical_difference():
    """Not only decode tok/s: each compared metric has an interval (from its per-request
    samples) and a verdict with the practical threshold; a repeat of the same server is "no
    practical difference", never "beyond noise"."""
    bf16, qat, bf16_again = l4_study()
    faster = compare_runs(bf16, qat, ("bf16", "qat"))
    for row in faster["levels"]:
        for key in ("decode_tokens_per_s", "output_tokens_per_s", "e2e_ms_p50"):
            m = row["metrics"][key]
            assert m["verdict"] == "b_better" and m["text"].startswith("qat faster by "), m
        assert row["metrics"]["ttft_ms_p99"]["text"].startswith("inconclusive: n too small")
    repeat = compare_runs(bf16, bf16_again, ("bf16", "bf16 again"))
    decode = {row["metrics"]["decode_tokens_per_s"]["verdict"] for row in repeat["levels"]}
    assert decode == {"equivalent"}
    text = format_comparison(repeat)
    assert "no practical difference" in text and "beyond noise" not in text
    assert text.count("verdict") >= len(repeat["levels"])


def test_compare_header_states_the_workload():
    bf16, qat, _ = l4_study()
    for phase in (bf16, qat):
        phase["workload"] = {"tokenizer": None, "input_tokens": 128, "output_tokens": 256,
                             "seed": 0, "dataset": None, "trace": None}
    text = format_comparison(compare_runs(bf16, qat, ("bf16", "qat")))
    line = next(line for line in text.splitlines() if line.startswith("Workload: "))
    assert "chat API; 128 input tokens; 256 output tokens; synthetic prompts (seed 0)" in line


def test_compare_command(tmp_path):
    paths = write_study(tmp_path, l4_study(simulated=True))
    runner = CliRunner()
    out = runner.invoke(compare_command, [str(paths[0]), str(paths[1])])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("SIMULATED")
    assert "bf16 846 ✗, qat 836 ✓" in out.output  # default labels: the phase labels
    labelled = runner.invoke(compare_command, [str(paths[0]), str(paths[1]),
                                               "--labels", "BF16,QAT", "--json"])
    data = json.loads(labelled.output)
    assert data["labels"] == ["BF16", "QAT"] and data["fidelity"]["identical"] == 35
    # Two phases with the same label get their file names instead.
    same = runner.invoke(compare_command, [str(paths[0]), str(paths[2])])
    assert "phase-1-bf16: 37/40 correct, phase-3-bf16: 37/40 correct" in same.output


@pytest.mark.parametrize("args, message", [
    (["missing.json", "missing.json"], "missing.json: no such file"),
    (["bad.json", "bad.json"], "bad.json: not a readable JSON file"),
    (["other.json", "other.json"], "other.json: not a loadgen results file"),
    (["a.json", "a.json", "--labels", "onlyone"], "--labels takes two names"),
])
def test_compare_command_errors_are_one_line(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"endpoint": "x"}')
    (tmp_path / "a.json").write_text(json.dumps(l4_study()[0]))
    out = CliRunner().invoke(compare_command, args)
    assert out.exit_code == 2
    assert message in out.output
    assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
