"""The report leads with the answer: the first section of report.html (parsed) holds the
headline sentence and table whose numbers are summary.json's; checkpoints share plot axes;
the output-length guard; paired study prompts; a mock-server's runs are simulated."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from loadgen import stats
from loadgen.report.document import money
from loadgen.report.html import render_html
from loadgen.report.summary import build_summary
from loadgen.report.workload import output_lengths
from tests.helpers.report_fixtures import L4_PRICE, l4_study


class _Sections(HTMLParser):
    """Sections of the page: id, the headline paragraph, tables as rows of cells, figures."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[dict] = []
        self.banners: list[str] = []
        self._where: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append({"id": attrs.get("id"), "headline": None, "rows": [],
                                  "figures": [], "paragraphs": []})
        elif tag == "div" and attrs.get("id") == "simulated-banner":
            self._where, self._text = "banner", []
        elif self.sections and tag == "p":
            self._where = "headline" if attrs.get("id") == "headline" else "p"
            self._text = []
        elif self.sections and tag == "tr":
            self.sections[-1]["rows"].append([])
        elif self.sections and tag in ("td", "th"):
            self._where, self._text = "cell", []
        elif self.sections and tag == "figure":
            self.sections[-1]["figures"].append(attrs.get("data-plot"))

    def handle_endtag(self, tag):
        text = "".join(self._text)
        if tag == "div" and self._where == "banner":
            self.banners.append(text)
        elif tag == "p" and self._where == "headline":
            self.sections[-1]["headline"] = text
        elif tag == "p" and self._where == "p":
            self.sections[-1]["paragraphs"].append(text)
        elif tag in ("td", "th") and self._where == "cell":
            self.sections[-1]["rows"][-1].append(text)
        else:
            return
        self._where = None

    def handle_data(self, data):
        if self._where:
            self._text.append(data)


@pytest.fixture(scope="module")
def summary():
    phases = l4_study(simulated=True)
    for phase, label in zip(phases, ("bf16-a", "qat", "bf16-b")):
        phase["phase"]["label"] = label
        phase["phase"]["checkpoint"] = label[:4]
    return json.loads(json.dumps(build_summary(phases, price_per_hour=L4_PRICE)))


def _page(summary: dict, plots: dict | None = None) -> _Sections:
    parser = _Sections()
    parser.feed(render_html(summary, plots or {}))
    return parser


def test_the_first_section_is_the_answer_with_summary_numbers(summary):
    page = _page(summary)
    first = page.sections[0]
    assert first["id"] == "the-answer"
    comparison = summary["comparison"]
    decode = comparison["single_stream_decode"]
    headline = first["headline"]
    assert headline.startswith(f"qat decodes {stats.times_text(decode['ci'])} as fast as bf16-a")
    at16 = comparison["levels"][-1]["metrics"]["cost_per_million_output_tokens"]
    assert f"costs {money(at16['b'])} instead of {money(at16['a'])} per 1M output tokens " \
           "at concurrency 16" in headline
    assert summary["drift"]["sentence"] in headline
    assert headline.endswith("the difference is the checkpoint.")
    rows = {row[0]: row[1:] for row in first["rows"]}
    assert rows[""] == ["bf16-a", "qat", "qat / bf16-a [95% CI]", "verdict"]
    assert rows["decode tok/s (single stream)"] == [
        f"{decode['a']:,.2f}", f"{decode['b']:,.2f}", stats.times_text(decode["ci"]),
        decode["text"]]
    for level in comparison["levels"]:
        tps = level["metrics"]["output_tokens_per_s"]
        assert rows[f"output tok/s, {level['label']}"][2] == stats.times_text(tps["ci"])
        cost = level["metrics"]["cost_per_million_output_tokens"]
        assert rows[f"$ per 1M output tokens, {level['label']}"][:2] == [
            money(cost["a"]), money(cost["b"])]
    fid = comparison["fidelity"]
    assert rows["fidelity: correct"][:2] == [f"{fid['score_a']}/40", f"{fid['score_b']}/40"]
    drift_row = next(v for k, v in rows.items() if k.startswith("A-B-A drift"))
    assert drift_row[-1] == "within tolerance"
    assert drift_row[2] == stats.change_text(summary["drift"]["baseline_moved"])
    assert any(p.startswith("Workload: ") for p in first["paragraphs"])
    # SIMULATED once, in the banner above everything.
    assert len(page.banners) == 1 and page.banners[0].startswith("SIMULATED: ")


def test_top1_agreement_is_shown_when_the_fidelity_comparison_has_it(summary):
    with_top1 = copy.deepcopy(summary)
    with_top1["comparison"]["fidelity"]["top1_agreement"] = 0.973
    rows = {row[0]: row[1:] for row in _page(with_top1).sections[0]["rows"]}
    assert rows["fidelity: top-1 token agreement"][2] == "97.3%"
    assert "fidelity: top-1 token agreement" not in {
        row[0] for row in _page(summary).sections[0]["rows"]}


def test_checkpoints_share_axes_and_levels_are_tables_with_a_column_per_phase(summary):
    from loadgen.report.plots import latency_throughput_plot, overlaid_cdf_plot

    phases = l4_study(simulated=True)
    named = list(zip(("bf16-a", "qat", "bf16-b"), phases))
    figures = {"latency_throughput": latency_throughput_plot(summary),
               "cdf_ttft_ms": overlaid_cdf_plot(summary, named, "ttft_ms", "TTFT")}
    # One axes for every checkpoint's latency-vs-throughput line, A₁ and A₂ as own markers.
    knee = figures["latency_throughput"].axes
    assert len(knee) == 1
    lines = knee[0].get_lines()
    assert [line.get_label() for line in lines] == ["bf16-a", "qat", "bf16-b"]
    assert lines[0].get_color() == lines[2].get_color() != lines[1].get_color()
    assert lines[0].get_marker() != lines[2].get_marker()
    # Overlaid CDFs: a panel per level (single stream first), a line per phase in each.
    cdf = [ax for ax in figures["cdf_ttft_ms"].axes if ax.get_visible()]
    assert [ax.get_title() for ax in cdf] == ["single stream", "concurrency 1",
                                              "concurrency 4", "concurrency 16"]
    assert all(len(ax.get_lines()) == 3 for ax in cdf)
    page = _page(summary, {key: b"png" for key in ("latency_throughput", "cdf_ttft_ms",
                                                   "cdf_itl_ms", "cost", "decode")})
    assert page.sections[1]["figures"][:3] == ["latency_throughput", "cdf_ttft_ms",
                                               "cdf_itl_ms"]
    levels = next(s for s in page.sections if s["id"] == "per-load-level")
    header = levels["rows"][0]
    assert header == ["metric", "bf16-a", "qat", "bf16-b", "qat / bf16-a [95% CI]", "verdict"]


def test_output_length_guard_flags_a_checkpoint_that_answers_shorter():
    phases = l4_study()
    for phase in phases:
        phase["workload"] = {"ignore_eos": False}
    for level in phases[1]["measurements"]["sweep"]:
        level["output_tokens"] = int(level["output_tokens"] * 0.8)  # QAT stops 20 % sooner
    named = list(zip(("bf16-a", "qat", "bf16-b"), phases))
    lengths = output_lengths(named)
    assert lengths["flagged"] == ["qat"]
    by_phase = {row["phase"]: row for row in lengths["phases"]}
    assert by_phase["qat"]["load_tokens_per_request"] == pytest.approx(256 * 0.8, abs=1)
    summary = build_summary(phases, labels="bf16-a,qat,bf16-b")
    page = _page(summary)
    assert any(p.startswith("OUTPUT LENGTH: qat answered more than ±10 %")
               for p in page.sections[0]["paragraphs"])
    # Fixed-length outputs (ignore_eos): the load levels are not compared.
    for phase in phases:
        phase["workload"] = {"ignore_eos": True}
    assert output_lengths(named)["flagged"] == []


def test_report_labels_name_the_phases_in_study_order(tmp_path):
    from loadgen.cli.main import cli
    from tests.helpers.report_fixtures import write_study

    write_study(tmp_path, l4_study())
    out = CliRunner().invoke(cli, ["report", str(tmp_path), "--format", "json",
                                   "--labels", "bf16-a,qat,bf16-b"])
    assert out.exit_code == 0, out.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [p["name"] for p in summary["phases"]] == ["bf16-a", "qat", "bf16-b"]
    assert summary["drift"]["phases"] == ["bf16-a", "bf16-b"]
    bad = CliRunner().invoke(cli, ["report", str(tmp_path), "--labels", "a,b"])
    assert bad.exit_code == 2 and "--labels takes three names" in bad.output


def test_study_phases_send_the_same_prompts_in_the_same_order():
    from loadgen.load import StopRule
    from loadgen.scenario import load_scenario
    from loadgen.scenario.phase import Endpoint, Measurer

    scenario = load_scenario("scenarios/demo-simulated.yaml")

    class _Doc:
        def describe_workload(self, *_):
            pass

    def texts(phase, measurement):
        endpoint = Endpoint("http://127.0.0.1:8000", {})
        measurer = Measurer(scenario, phase, endpoint, _Doc(), None, print)
        config = measurer._config(4, StopRule(requests=8), 128, measurement)
        return [config.prompts.prompt(i).text for i in range(6)]

    a1, b, a2 = scenario.phases
    assert texts(a1, "sweep-c4") == texts(b, "sweep-c4") == texts(a2, "sweep-c4")
    assert texts(a1, "sweep-c4") != texts(a1, "sweep-c16")  # no prefix cache carry-over


@pytest.mark.integration
def test_a_mock_server_announces_itself_and_runs_against_it_are_simulated(sim_url, tmp_path):
    import urllib.request

    from loadgen.cli.main import cli
    from loadgen.config import SIMULATOR_HEADER, SIMULATOR_OWNER

    with urllib.request.urlopen(sim_url + "/v1/models", timeout=10) as response:
        assert response.headers[SIMULATOR_HEADER]
        assert json.loads(response.read())["data"][0]["owned_by"] == SIMULATOR_OWNER
    out = tmp_path / "run.json"
    run = CliRunner().invoke(cli, ["run", "--target", sim_url, "--requests", "2",
                                   "--output-tokens", "4", "--out", str(out), "--quiet"])
    assert run.exit_code == 0, run.output
    result = json.loads(out.read_text())
    assert result["simulated"] is True and result["target"]["simulator"] is True
