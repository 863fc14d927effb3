"""The server's timeline from the simulator (KV usage, the queue and preemptions follow
from load), the client timeline beside it, and the SLO search finding the simulator's
knee."""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
import pytest
from click.testing import CliRunner

from loadgen.api import sweep
from loadgen.cli.main import cli
from loadgen.load import ConstantConcurrency, StopRule
from loadgen.report.files import report_file
from loadgen.report.summary import build_summary
from loadgen.report.timeline_plots import render_timeline_figures
from loadgen.report.table import format_table
from loadgen.simulator import SimProfile
from loadgen.workload.settings import WorkloadSettings

pytestmark = pytest.mark.integration  # starts simulators

# 64 blocks x 16 = 1,024 KV tokens. A request holds its prompt (~70 tokens as the
# simulator counts them) plus up to 48 generated: ~8 fit at once, so 2 streams use a
# fraction of the cache and 24 fill it, queue and get preempted.
SMALL_KV = SimProfile(ttft_s=0.005, itl_s=0.004, batch_slowdown=0.0, max_num_seqs=64,
                      block_size=16, num_gpu_blocks=64)


def test_kv_usage_queue_and_preemptions_follow_the_load(start_sim):
    url = start_sim(SMALL_KV)
    result = asyncio.run(sweep(url, loads=[ConstantConcurrency(2), ConstantConcurrency(24)],
                               stop=StopRule(duration_s=1.0, graceful_stop_s=10),
                               workload=WorkloadSettings(input_tokens=64, output_tokens=48),
                               server_metrics_interval_s=0.2))
    low, high = (level.data for level in result.levels)
    low_server, high_server = low["server_metrics"], high["server_metrics"]
    assert high_server["summary"]["kv_cache_usage_perc"]["max"] > \
        2 * low_server["summary"]["kv_cache_usage_perc"]["max"]
    assert high_server["summary"]["kv_cache_usage_perc"]["max"] > 0.8
    assert low_server["summary"]["num_requests_waiting"]["max"] == 0
    assert high_server["summary"]["num_requests_waiting"]["max"] >= 1
    assert low_server["preemptions"] == 0 and high_server["preemptions"] >= 1
    assert max(v or 0 for v in high_server["samples"]["preemptions_per_s"]) > 0
    assert high_server["families"]["preemptions"] == "vllm:num_preemptions"
    # Server-side TTFT from vLLM's histogram; the client's is longer by its own share.
    ttft = high_server["totals"]["histograms"]["ttft"]
    assert ttft["count"] >= high["requests"]["completed"] - 24
    assert set(high_server["client_minus_server_ms"]) == {"ttft_mean", "tpot_mean"}
    # The client timeline sits beside it on the same clock, the offset stated.
    timeline = high["timeline"]
    assert sum(timeline["columns"]["finished"]) == high["requests"]["completed"]
    assert abs(timeline["sources"]["server_metrics"]["offset_s"]) < 1.0
    assert 20 <= max(timeline["columns"]["in_flight"]) <= 24
    table = format_table([low, high])
    assert "KV peak %" in table.splitlines()[0] and "preempt" in table.splitlines()[0]


# Four running slots, 10 ms TTFT, 100 ms between tokens, 4 tokens: a request takes ~310 ms.
# Up to 4 streams no request waits (TTFT ~10 ms, plus whatever a loaded machine adds to the
# client's side); a 5th always waits for a slot, about one whole request. With "TTFT p99
# <= 250 ms" the knee is exactly max_num_seqs = 4, with room on both sides of the limit
# (a loaded test machine adds client delay: only to the passing side's ~10 ms).
KNEE_PROFILE = SimProfile(ttft_s=0.01, itl_s=0.1, batch_slowdown=0.0, max_num_seqs=4)


def test_slo_search_finds_the_simulators_knee(start_sim, tmp_path):
    url = start_sim(KNEE_PROFILE)
    out = tmp_path / "knee.json"
    result = CliRunner().invoke(cli, [
        "sweep", "--target", url, "--profile", "slo-search", "--slo", "ttft_ms:p99<=250",
        "--concurrency", "4", "--output-tokens", "4", "--input-tokens", "16", "--out", str(out)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = orjson.loads(out.read_bytes())
    knee = data["profile"]
    probed = [probe["load"] for probe in knee["probes"]]
    assert probed == [4, 8, 6, 5]  # from --concurrency 4: doubling, then bisection
    assert knee["knee"] == KNEE_PROFILE.max_num_seqs and knee["bracket"] == [4, 5]
    assert knee["stopped"] == "within precision"
    failing = {probe["load"]: probe["failing"] for probe in knee["probes"]}
    assert failing[5][0].startswith("ttft_ms:p99<=250: p99 was")
    assert [lv["load"]["concurrency"] for lv in data["levels"]] == probed
    assert all(lv["requests"]["completed"] >= 4 * lv["load"]["concurrency"]
               for lv in data["levels"])  # at least 4 waves per probe
    assert "knee (ttft_ms:p99<=250): concurrency 4" in result.output
    # The queue the SLO ran into: nothing waits at the knee, one stream waits above it.
    by_load = {lv["load"]["concurrency"]: lv["server_metrics"] for lv in data["levels"]}
    assert by_load[4]["summary"]["num_requests_waiting"]["max"] == 0
    assert by_load[5]["summary"]["num_requests_waiting"]["max"] >= 1
    # The report: the search's section, what the server did, and the figures.
    directory, _ = report_file(out, formats=("md",))
    markdown = (directory / "report.md").read_text().replace("\\", "")
    assert "The knee: highest load meeting the SLOs" in markdown
    assert "the highest concurrency meeting ttft_ms:p99<=250 is 4 (5 failed)" in markdown
    assert "At the knee (4): KV cache peaked at" in markdown
    assert "Above it (5): " in markdown and "queue peaked at 1 waiting" in markdown
    figures = render_timeline_figures(build_summary([data]), [("phase", data)])
    assert set(figures) == {"timeline_0", "knee_0"}  # one phase: no A/B overlay
    panels = [ax.get_ylabel() for ax in figures["timeline_0"].axes]
    assert panels == ["tokens/s", "ms", "requests", "% used", "per s"]
    two = render_timeline_figures(build_summary([data, data]), [("bf16", data), ("qat", data)])
    assert "knee_1" in two
    overlay = two["ab_server"].axes
    assert [ax.get_ylabel() for ax in overlay] == ["KV cache % used", "waiting requests"]
    assert [line.get_label() for line in overlay[1].get_lines()] == ["bf16", "qat"]


def test_scenario_runs_a_knee_search_per_phase(start_sim, tmp_path):
    """``measurements: knee`` searches the phase; its probes and the search are saved."""
    import textwrap

    from loadgen.scenario import load_scenario
    from loadgen.scenario.runner import RunOptions, run_scenario

    url = start_sim(dataclasses.replace(KNEE_PROFILE, max_num_seqs=1))
    path = tmp_path / "knee.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: knee-study
        hardware: {{instance_type: test-box}}
        request: {{input_tokens: 16}}
        measurements:
          single_stream: {{enabled: false}}
          fixed_length: {{enabled: false}}
          sweep: {{enabled: false}}
          fidelity: {{enabled: false}}
          knee: {{slo: ["ttft_ms:p99<=250"], output_tokens: 4, warmup: 1}}
        phases:
          - {{label: bf16, checkpoint: bf16, target: "{url}"}}
        """))
    out = tmp_path / "out"
    messages: list[str] = []
    result = asyncio.run(run_scenario(load_scenario(path, {}, environ={}), RunOptions(out),
                                      log=messages.append))
    assert result.ok
    data = orjson.loads((out / "phase-bf16.json").read_bytes())
    search = data["measurements"]["knee_search"]
    assert search["knee"] == 1 and search["bracket"] == [1, 2]  # one slot: 2 streams queue
    assert [lv["load"]["concurrency"] for lv in data["measurements"]["knee"]] == [1, 2]
    assert search["probes"][1]["server"]["waiting_peak"] >= 1
    assert any("knee (ttft_ms:p99<=250): concurrency 1" in m for m in messages)


def test_slo_search_with_workers_sends_each_probe_to_every_worker(start_sim, tmp_path):
    """The parent's plan picks each level; the workers measure the load they are sent."""
    url = start_sim(dataclasses.replace(KNEE_PROFILE, max_num_seqs=2))
    out = tmp_path / "knee.json"
    result = CliRunner().invoke(cli, [
        "sweep", "--target", url, "--profile", "slo-search", "--slo", "ttft_ms:p99<=250",
        "--concurrency", "2", "--workers", "2", "--output-tokens", "4", "--input-tokens", "16",
        "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = orjson.loads(out.read_bytes())
    assert [p["load"] for p in data["profile"]["probes"]] == [2, 4, 3]
    assert data["profile"]["knee"] == 2
    assert [sum(w["completed"] for w in lv["workers"]) for lv in data["levels"]] == [
        lv["requests"]["completed"] for lv in data["levels"]]
    assert all(len(lv["workers"]) == 2 for lv in data["levels"])
