"""`loadgen report DIR`: every format written from fixture phase files, escaped, labelled."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from click.testing import CliRunner

from loadgen.cli.report import report as report_command
from loadgen.errors import ConfigError
from loadgen.report import parse_formats, report_directory, write_reports
from loadgen.report.markdown import escape as md_escape
from tests.helpers.report_fixtures import L4_PRICE, l4_study, write_study

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

EVIL = "bf16<script>alert('x')</script>|*"


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("study")
    write_study(directory, l4_study(simulated=True))
    (directory / "deployment-record.json").write_text('{"endpoint_name": "x"}')  # ignored
    output = report_directory(directory, price_per_hour=L4_PRICE)
    return directory, output


# In page order: the checkpoints overlaid first, then the per-phase panels.
PLOT_KEYS = ("latency_throughput", "cdf_ttft_ms", "cdf_itl_ms", "cost", "decode", "throughput",
             "latency_ttft_ms", "latency_itl_ms", "latency_e2e_ms")


def test_all_formats_are_written(study_dir):
    directory, output = study_dir
    written = [p.relative_to(directory).as_posix() for paths in output.files.values()
               for p in paths]
    assert {w for w in written if "/" not in w} == {
        "summary.json", "report.md", "report.html", "report.csv", "fidelity.csv"}
    # Every plot also as a file beside the report, to attach to a pull request.
    plots = {w for w in written if w.startswith("plots/")}
    assert plots == {f"plots/{key}.{ext}" for key in PLOT_KEYS for ext in ("png", "svg")}
    assert (directory / "plots" / "cost.png").read_bytes().startswith(b"\x89PNG")
    assert "<svg" in (directory / "plots" / "latency_itl_ms.svg").read_text()[:500]
    summary = json.loads((directory / "summary.json").read_text())
    assert summary == json.loads(json.dumps(output.summary))
    assert [p["file"] for p in summary["phases"]] == [
        "phase-1-bf16.json", "phase-2-qat.json", "phase-3-bf16.json"]


def test_markdown_has_the_studys_numbers_and_the_simulated_label(study_dir):
    text = (study_dir[0] / "report.md").read_text()
    # No scenario name: the title names what was compared.
    assert text.startswith("# loadgen report: google/gemma-4-E2B-it vs "
                           "google/gemma-4-E2B-it-qat-w4a16-ct\n\n> **SIMULATED: these numbers "
                           "come from loadgen's built-in simulator")
    assert text.count("SIMULATED") == 1  # one banner, at the top
    for needle in ("| $ per 1M output tokens, concurrency 1 | $6.86 | $3.67 | 0.53× \\[",
                   "| $ per 1M output tokens, concurrency 16 | $0.51 | $0.29 |",
                   "| output tok/s | 619.10 | 1,077.25 | 625.15 | 1.74× \\[",
                   "| fidelity: correct | 37/40 | 37/40 | – | 35/40 identical",
                   "| within tolerance |", "| model weights (GiB) | 9.75 | 8.01 | 9.75 |",
                   "| KV-cache capacity (tokens) | 723,484 | 867,999 | 723,484 |",
                   "| price\\_per\\_hour | 1.1267 |",
                   "Measured: bf16 #1: google/gemma-4-E2B-it at sagemaker ",
                   "qat: google/gemma-4-E2B-it-qat-w4a16-ct at sagemaker", "Price: $1.1267/h."):
        assert needle in text, needle
    assert len(re.findall(r"^- .*\(expected \d+\): ", text, re.M)) == 5


def test_html_is_self_contained_and_labelled(study_dir):
    page = (study_dir[0] / "report.html").read_text()
    assert 'id="simulated-banner"' in page and page.count("SIMULATED: these numbers") == 1
    keys = re.findall(r'<figure data-plot="([^"]+)"><img alt="[^"]*" '
                      r'src="data:image/png;base64,', page)
    assert keys == list(PLOT_KEYS)
    # Nothing is fetched from anywhere: no external src/href (only links within the page).
    assert not re.search(r'(?:src|href)="(?!data:|#)', page)
    # A table of contents whose every link has its section.
    targets = re.findall(r'<a href="#([^"]+)">', page)
    assert len(targets) >= 8 and all(f'<section id="{t}">' in page for t in targets)
    assert "<script" not in page


def test_csv_exports(study_dir):
    rows = list(csv.DictReader(io.StringIO((study_dir[0] / "report.csv").read_text())))
    assert len(rows) == 9
    first = rows[0]
    assert (first["phase"], first["level"], first["simulated"]) == ("bf16 #1", "concurrency 1",
                                                                    "True")
    assert round(float(first["cost_per_million_output_tokens"]), 2) == 6.86
    assert float(first["itl_ms_p50"]) > 0 and first["decode_tokens_per_s_mean"]
    answers = list(csv.DictReader(io.StringIO((study_dir[0] / "fidelity.csv").read_text())))
    assert len(answers) == 120
    assert sum(a["correct"] == "True" for a in answers if a["phase"] == "qat") == 37


def test_strings_from_results_are_escaped(tmp_path):
    phases = l4_study()
    for phase in phases:
        phase["phase"]["label"] = EVIL if phase["phase"]["label"] == "bf16" else "qat"
        phase["server"]["note"] = "<img src=x onerror=alert(1)>"
    output = write_reports(tmp_path, phases, formats=("md", "html"), price_per_hour=L4_PRICE)
    page = (tmp_path / "report.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "bf16&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;|*" in page
    markdown = (tmp_path / "report.md").read_text()
    assert "<script>" not in markdown and md_escape(EVIL) in markdown
    assert "\\|\\*" in md_escape(EVIL)
    assert output.summary["simulated"] is False
    assert "SIMULATED" not in markdown and "SIMULATED" not in page


def test_rerun_reuses_the_earlier_summarys_metadata(tmp_path):
    write_study(tmp_path, l4_study())
    info = {"scenario": "l4-sagemaker-gemma4-e2b", "scenario_sha256": "f" * 64,
            "price_per_hour": L4_PRICE}
    write_reports(tmp_path, l4_study(), formats=("json",), run_info=info, drift_tolerance=0.02)
    again = report_directory(tmp_path, formats=("md", "json"))
    assert again.summary["run"]["scenario_sha256"] == "f" * 64
    assert again.summary["run"]["price_per_hour"] == L4_PRICE
    assert again.summary["drift"]["tolerance"] == 0.02
    assert "# loadgen report: l4-sagemaker-gemma4-e2b" in (tmp_path / "report.md").read_text()
    cheaper = report_directory(tmp_path, formats=("json",), price_per_hour=0.5)
    assert cheaper.summary["run"]["price_per_hour"] == 0.5


def test_format_parsing():
    assert parse_formats("md, html,md") == ("md", "html")
    with pytest.raises(ConfigError, match="unknown report format pdf: choose from"):
        parse_formats("md,pdf")


def test_report_command(tmp_path):
    write_study(tmp_path, l4_study(simulated=True))
    out = CliRunner().invoke(report_command, [str(tmp_path), "--format", "md,csv",
                                              "--price-per-hour", "1.1267"])
    assert out.exit_code == 0, out.output
    assert "SIMULATED" in out.output
    assert (tmp_path / "report.md").exists() and (tmp_path / "report.csv").exists()
    assert not (tmp_path / "report.html").exists()


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "no loadgen results files"),
    (lambda d: (d / "x.json").write_text("[1, 2]"), "expected a JSON object"),
])
def test_report_command_errors(tmp_path, setup, message):
    setup(tmp_path)
    out = CliRunner().invoke(report_command, [str(tmp_path)])
    assert out.exit_code == 2 and message in out.output
    assert len(out.output.strip().splitlines()) == 1
    missing = CliRunner().invoke(report_command, [str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such file or directory" in missing.output


def test_report_command_rejects_a_bad_price(tmp_path):
    write_study(tmp_path, l4_study()[:1])
    out = CliRunner().invoke(report_command, [str(tmp_path), "--price-per-hour", "-1"])
    assert out.exit_code == 2
    assert "price per hour must be a positive number of dollars, got -1.0" in out.output


def test_a_phase_that_measured_nothing_still_renders(tmp_path):
    """A phase that failed early: null stats, no single stream, no fidelity, no histograms."""
    empty_stats = dict.fromkeys(("min", "mean", "p50", "p90", "p99", "max")) | {"count": 0}
    dead_level = {"load": {"mode": "concurrency", "concurrency": 4},
                  "requests": {"completed": 0, "failed": 12, "incomplete": 0, "dropped": 0,
                               "errors": {"http_500": 12}},
                  "duration_s": 1.0, "output_tokens": 0, "output_tokens_per_s": 0.0,
                  "requests_per_s": 0.0, "ttft_ms": empty_stats, "itl_ms": empty_stats,
                  "e2e_ms": empty_stats, "decode_tokens_per_s": empty_stats,
                  "client": {"saturated": True, "warning": "event loop lagged 80 ms"}}
    phase = {"loadgen_version": "0.1.0", "target": {}, "partial": True, "simulated": False,
             "phase": {"label": "qat", "order_index": 1, "status": "failed", "error": "boom"},
             "measurements": {"single_stream": None, "fixed_length": None,
                              "sweep": [dead_level]},
             "fidelity": None, "levels": [dead_level]}
    output = write_reports(tmp_path, [l4_study()[0], phase], price_per_hour=L4_PRICE)
    level = output.summary["phases"][1]["levels"][0]
    assert level["cost_per_million_output_tokens"] is None
    markdown = (tmp_path / "report.md").read_text()
    assert "| completed/failed | 40/0 | 0/12 |" in markdown
    assert "- qat, concurrency 4: event loop lagged 80 ms" in markdown
    assert "PARTIAL" in markdown
    assert (tmp_path / "report.html").stat().st_size > 0


def test_non_streaming_phases_are_called_out(tmp_path):
    """A phase measured without streaming says that its TTFT is the whole latency."""
    from loadgen.report import write_reports
    from tests.helpers.report_fixtures import l4_study

    results = l4_study()[:2]
    results[1]["target"]["stream"] = False
    out = write_reports(tmp_path, results, formats=("md",), price_per_hour=1.1267)
    text = (tmp_path / "report.md").read_text()
    assert "NON-STREAMING: qat" in text and "NON-STREAMING: bf16" not in text and "TTFT equals the end-to-end latency" in text
    assert out.summary["phases"][1]["target"]["stream"] is False


def test_report_on_a_plain_sweep_results_file(sim_url, tmp_path):
    """`loadgen report FILE.json` on what `loadgen sweep --out` wrote: no study sections."""
    from loadgen.cli.main import cli

    results = tmp_path / "sweep.json"
    run = CliRunner().invoke(cli, ["sweep", "--target", sim_url, "--concurrency", "1,2",
                                   "--requests", "3", "--output-tokens", "4", "--out",
                                   str(results), "--quiet"])
    assert run.exit_code == 0, run.output
    out = CliRunner().invoke(cli, ["report", str(results), "--format", "md,json,csv"])
    assert out.exit_code == 0, out.output
    directory = tmp_path / "sweep-report"
    assert {p.name for p in directory.iterdir()} == {"report.md", "summary.json", "report.csv"}
    markdown = (directory / "report.md").read_text()
    assert "## Per load level" in markdown and "verdict" not in markdown
    assert "drift" not in markdown.lower() and "## Comparison" not in markdown
    assert "## Fidelity" not in markdown and "single stream" not in markdown
    assert "loadgen-sim, concurrency 2:" in markdown  # the levels are the headline
    assert sim_url in markdown  # the phases table names the target
