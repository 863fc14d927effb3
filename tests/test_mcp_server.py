"""``loadgen mcp`` through the SDK's in-memory client: tools, background runs against the
simulator, limits, scenarios, reports, comparisons, resources and tool errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.mcp.options import ServerOptions
from loadgen.mcp.redact import scrub, secret_values
from loadgen.report.table import format_table
from loadgen.simulator import SimProfile
from tests.helpers.mcp_session import (
    call,
    call_error,
    poll_until,
    poll_until_ended,
    session,
)

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {"list_endpoints", "endpoint_status", "deploy_endpoint", "delete_endpoint",
         "deployment_facts", "start_run", "run_status", "cancel_run", "get_results",
         "run_scenario", "validate_scenario", "get_report", "compare_runs", "list_runs",
         "start_server", "server_status", "stop_server", "server_logs"}
# Slow enough that a run's numbers are the simulator's, not the client's noise.
STEADY = SimProfile(ttft_s=0.1, itl_s=0.02, batch_slowdown=0.0)


def options(tmp_path: Path, **limits) -> ServerOptions:
    """A server whose clients may read tmp_path (scenarios, results files written there)."""
    limits.setdefault("allow_read", (tmp_path,))
    return ServerOptions(workdir=tmp_path / "work", **limits)


def test_tool_list_has_the_fixed_names_typed_described_inputs_and_output_schemas(tmp_path):
    tools = session(options(tmp_path), lambda client: client.list_tools())
    by_name = {tool.name: tool for tool in tools.tools}
    assert set(by_name) == TOOLS
    for tool in tools.tools:
        assert tool.description, tool.name
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)
            assert "ctx" not in tool.input_schema["properties"]
    start = by_name["start_run"].input_schema
    assert start["required"] == ["target"]
    assert start["properties"]["requests"]["anyOf"][0] == {"type": "integer", "minimum": 1}
    assert start["properties"]["api"]["enum"] == ["chat", "completions"]
    assert set(by_name["deploy_endpoint"].input_schema["required"]) == {"name", "image"}
    assert by_name["compare_runs"].input_schema["required"] == ["a", "b"]
    assert by_name["get_report"].input_schema["properties"]["format"]["enum"] == ["md", "json"]
    assert by_name["deploy_endpoint"].annotations.destructive_hint is True
    assert by_name["delete_endpoint"].annotations.destructive_hint is True
    assert by_name["list_runs"].annotations.read_only_hint is True
    status = by_name["run_status"].output_schema["properties"]
    assert {"state", "elapsed_s", "completed", "failed", "ttft_ms", "itl_ms"} <= set(status)


def test_start_run_polled_to_completion_equals_a_cli_run_of_the_same_load(tmp_path, start_sim):
    url = start_sim(STEADY)
    load = {"concurrency": [2], "requests": 8, "output_tokens": 10, "input_tokens": 16}

    async def body(client):
        started = await call(client, "start_run", target=url, **load)
        assert started["state"] == "running" and started["notes"] == []
        status = await poll_until_ended(client, started["run_id"])
        results = await call(client, "get_results", run_id=started["run_id"])
        return started, status, results

    started, status, results = session(options(tmp_path), body)
    assert status["state"] == "complete" and status["partial"] is False
    assert (status["completed"], status["failed"], status["output_tokens"]) == (8, 0, 80)
    assert (status["levels_done"], status["levels_total"]) == (1, 1)
    results_file = Path(started["directory"]) / "results.json"
    on_disk = json.loads(results_file.read_text())
    assert results["table"] == format_table(on_disk["levels"])  # the CLI's table, same numbers
    assert "histograms" not in results["levels"][0] and "histograms" in on_disk["levels"][0]

    cli_out = tmp_path / "cli.json"
    done = CliRunner().invoke(cli, ["run", "--target", url, "--concurrency", "2", "--requests",
                                    "8", "--output-tokens", "10", "--input-tokens", "16",
                                    "--out", str(cli_out), "--quiet"])
    assert done.exit_code == 0, done.output
    mcp_level, cli_level = results["levels"][0], json.loads(cli_out.read_text())["levels"][0]
    assert mcp_level["load"] == cli_level["load"]
    assert mcp_level["requests"] == cli_level["requests"]
    assert mcp_level["output_tokens"] == cli_level["output_tokens"] == 80
    # Within noise: same simulator, same load. ITL by its mean: on a busy machine a late
    # read bunches chunks, which moves ITL's median but not its mean.
    for metric, stat in (("ttft_ms", "p50"), ("e2e_ms", "p50"), ("itl_ms", "mean")):
        ratio = mcp_level[metric][stat] / cli_level[metric][stat]
        assert 0.67 < ratio < 1.5, (metric, mcp_level[metric], cli_level[metric])


def test_run_status_waits_and_sends_progress_notifications(tmp_path, sim_url):
    notes: list[tuple] = []

    async def on_progress(progress, total, message):
        notes.append((progress, total, message))

    async def body(client):
        started = await call(client, "start_run", target=sim_url, concurrency=[1, 2],
                             requests=6, output_tokens=100)
        result = await client.call_tool("run_status", {"run_id": started["run_id"],
                                                       "wait_s": 60},
                                        progress_callback=on_progress)
        return result.structured_content

    status = session(options(tmp_path), body)
    assert status["state"] == "complete" and status["completed"] == 12
    assert notes and all(total == 12 for _, total, _ in notes)
    assert [p for p, _, _ in notes] == sorted(p for p, _, _ in notes)
    assert any("level" in message and "done" in message for _, _, message in notes)


def test_cancel_run_keeps_the_partial_results_and_the_server_goes_on(tmp_path, start_sim):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.005))

    async def body(client):
        started = await call(client, "start_run", target=url, concurrency=[2, 4],
                             requests=100_000, output_tokens=8)
        run_id = started["run_id"]
        await poll_until(client, run_id, lambda s: s["completed"] >= 4)
        cancelled = await call(client, "cancel_run", run_id=run_id)
        results = await call(client, "get_results", run_id=run_id)
        again = await call_error(client, "cancel_run", run_id=run_id)
        runs = await call(client, "list_runs")
        return cancelled, results, again, runs

    cancelled, results, again, runs = session(options(tmp_path), body)
    assert cancelled["state"] == "cancelled" and cancelled["partial"] is True
    assert cancelled["completed"] >= 4 and cancelled["levels_done"] == 1
    assert results["partial"] is True and len(results["levels"]) == 1
    assert results["levels"][0]["requests"]["completed"] == cancelled["completed"]
    assert "already ended (cancelled)" in again
    assert [(r["state"], r["kind"]) for r in runs["runs"]] == [("cancelled", "load")]


def test_the_servers_limits_cap_every_run(tmp_path, sim_url):
    async def body(client):
        too_wide = await call_error(client, "start_run", target=sim_url, concurrency=[1, 8])
        too_long = await call_error(client, "start_run", target=sim_url, concurrency=[1, 2],
                                    duration_s=1.5)
        capped = await call(client, "start_run", target=sim_url, rate=[50.0], requests=5,
                            output_tokens=4)
        busy = await call_error(client, "start_run", target=sim_url, requests=1)
        await poll_until_ended(client, capped["run_id"])
        endless = await call(client, "start_run", target=sim_url, requests=10_000_000,
                             output_tokens=4)
        stopped = await poll_until_ended(client, endless["run_id"])
        return too_wide, too_long, capped, busy, stopped

    too_wide, too_long, capped, busy, stopped = session(
        options(tmp_path, max_concurrency=4, max_duration_s=2.0), body)
    assert "concurrency 8 is above this server's limit of 4" in too_wide
    assert "more than this server's run limit of 2 s" in too_long
    assert capped["request"]["max_in_flight"] == 4 and "max_in_flight" in capped["notes"][0]
    assert f"run {capped['run_id']} is still going" in busy
    assert stopped["state"] == "stopped" and stopped["partial"] is True
    assert stopped["completed"] > 0 and stopped["levels_done"] == 1


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(tmp_path):
    async def body(client):
        errors = [
            await call_error(client, "start_run", target="simulator", concurrency=[0]),
            await call_error(client, "start_run", concurrency=[1]),
            await call_error(client, "start_run", target="simulator", concurrency=[1],
                             rate=[2.0]),
            await call_error(client, "start_run", target="simulator", api="grpc"),
            await call_error(client, "run_status", run_id="../../etc"),
            await call_error(client, "get_results", run_id="20260101-000000-abcd"),
            await call_error(client, "compare_runs", a=str(tmp_path / "nope.json"), b="x.json"),
            await call_error(client, "validate_scenario", file=str(tmp_path / "nope.yaml")),
            await call_error(client, "deployment_facts"),
        ]
        return errors, await call(client, "list_runs")

    errors, runs = session(options(tmp_path), body)
    expected = ["concurrency[0] must be >= 1", "target", "not both", "api",
                "is not a run id", "no run 20260101-000000-abcd", "nope.json: no such file",
                "nope.yaml: no such file", "exactly one of log_file, endpoint, url"]
    for text, wanted in zip(errors, expected):
        assert wanted in text and "Traceback" not in text, text
    assert runs["runs"] == []


def test_compare_report_and_resources_of_two_runs(tmp_path, sim_url):
    async def body(client):
        ids = []
        for _ in range(2):
            started = await call(client, "start_run", target=sim_url, concurrency=[1, 2],
                                 requests=4, output_tokens=8)
            await poll_until_ended(client, started["run_id"])
            ids.append(started["run_id"])
        comparison = await call(client, "compare_runs", a=ids[0], b=ids[1])
        report = await call(client, "get_report", dir=ids[0])
        summary = await call(client, "get_report", dir=ids[0], format="json")
        resource = await client.read_resource(f"loadgen://runs/{ids[1]}/results")
        listing = await client.read_resource("loadgen://runs")
        md = await client.read_resource(f"loadgen://runs/{ids[1]}/report")
        return ids, comparison, report, summary, resource, listing, md

    ids, comparison, report, summary, resource, listing, md = session(options(tmp_path), body)
    assert comparison["labels"] == ids
    levels = comparison["comparison"]["levels"]
    assert [row["label"] for row in levels] == ["concurrency 1", "concurrency 2"]
    assert all(row["metrics"]["output_tokens_per_s"]["ratio"] > 0 for row in levels)
    assert ids[1] in comparison["text"]
    assert report["text"].startswith("# loadgen report") and report["files"][0].endswith(
        "report.md")
    assert summary["summary"]["phases"] and summary["text"] is None
    data = json.loads(resource.contents[0].text)
    assert [lv["requests"]["completed"] for lv in data["levels"]] == [4, 4]
    assert [run["run_id"] for run in json.loads(listing.contents[0].text)] == ids[::-1]
    assert md.contents[0].mime_type == "text/markdown" and "## " in md.contents[0].text


def small_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(textwrap.dedent("""\
        name: small
        hardware: {instance_type: test-box, price_per_hour: 2.0}
        request: {input_tokens: 8}
        measurements:
          single_stream: {requests: 2, output_tokens: 8, warmup: 0}
          fixed_length: {output_tokens: 16, repeats: 1}
          sweep: {concurrency: [1, 2], requests_per_stream: 1, output_tokens: 8}
          fidelity: {enabled: false}
        phases:
          - {label: a, checkpoint: a, target: "${A_URL}"}
          - {label: b, checkpoint: b, target: "${B_URL}"}
        simulate:
          time_scale: 20
          profiles:
            a: {preset: l4-bf16}
            b: {preset: l4-qat-w4a16}
        """))
    return path


def test_scenario_validate_and_simulated_run(tmp_path):
    path = small_scenario(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text(path.read_text().replace("requests: 2,", "requests: -2,")
                      .replace("checkpoint: b,", "checkpoint: b, colour: red,"))

    async def body(client):
        real = await call(client, "validate_scenario", file=str(path))
        lenient = await call(client, "validate_scenario", file=str(path), simulate=True)
        bad = await call(client, "validate_scenario", file=str(broken), simulate=True)
        refused = await call_error(client, "run_scenario", file=str(broken), simulate=True)
        started = await call(client, "run_scenario", file=str(path), simulate=True)
        status = await poll_until_ended(client, started["run_id"])
        results = await call(client, "get_results", run_id=started["run_id"])
        return real, lenient, bad, refused, status, results

    real, lenient, bad, refused, status, results = session(options(tmp_path), body)
    assert real["ok"] is False and "${A_URL} is not set" in real["problems"][0]
    assert lenient["ok"] is True and "small" in lenient["description"]
    assert len(lenient["warnings"]) == 2
    assert bad["ok"] is False and len(bad["problems"]) == 2
    assert all(p.startswith(f"{broken}:") for p in bad["problems"])
    assert "has 2 problem(s)" in refused
    assert status["state"] == "complete", status
    assert results["simulated"] is True
    assert {"phase-a.json", "phase-b.json", "report.md", "summary.json"} <= set(results["files"])
    assert [p["name"] for p in results["summary"]["phases"]] == ["a", "b"]


def test_secrets_are_masked_in_every_output():
    secret = "sk-live-0123456789abcdef"
    secrets = secret_values({"OPENAI_API_KEY": secret, "HF_TOKEN": "hf_abcdefghijkl",
                             "PATH": "/usr/bin:/bin", "SHORT_KEY": "1"})
    assert secrets == [secret, "hf_abcdefghijkl"]
    output = {"error": f"401 for key {secret}", "list": [f"x{secret}y", 3], secret: None}
    assert scrub(output, secrets) == {"error": "401 for key ***", "list": ["x***y", 3],
                                      "***": None}


def test_the_server_masks_a_secret_that_reaches_a_tool_output(tmp_path, monkeypatch):
    secret = "hf_leaked_by_the_caller_9f8e7d"
    monkeypatch.setenv("HF_TOKEN", secret)
    missing = tmp_path / f"{secret}.yaml"  # a path the error message repeats

    async def body(client):
        return await call_error(client, "validate_scenario", file=str(missing))

    text = session(options(tmp_path), body)
    assert ".yaml: no such file" in text and secret not in text and "***" in text


def test_deployment_facts_from_a_vllm_log(tmp_path):
    logs = ROOT / "tests" / "fixtures" / "vllm_logs"
    expected = json.loads((logs / "expected.json").read_text())["vllm-0.10.2.log"]

    async def body(client):
        return await call(client, "deployment_facts", log_file=str(logs / "vllm-0.10.2.log"))

    facts = session(options(tmp_path, allow_read=(logs,)), body)
    assert facts["found"] is True and facts["facts"] == expected
    assert "723,484" in facts["table"] or "723484" in facts["table"]


def test_runs_of_an_earlier_server_are_listed_and_readable(tmp_path, sim_url):
    async def first(client):
        started = await call(client, "start_run", target=sim_url, requests=2, output_tokens=4)
        await poll_until_ended(client, started["run_id"])
        return started["run_id"]

    run_id = session(options(tmp_path), first)

    async def second(client):
        return (await call(client, "list_runs"),
                await call(client, "get_results", run_id=run_id),
                await call(client, "run_status", run_id=run_id))

    runs, results, status = session(options(tmp_path), second)
    assert [r["run_id"] for r in runs["runs"]] == [run_id]
    assert results["levels"][0]["requests"]["completed"] == 2
    assert status["state"] == "complete" and status["completed"] == 2


def test_closing_the_session_stops_a_running_run_and_keeps_its_results(tmp_path, sim_url):
    async def body(client):
        started = await call(client, "start_run", target=sim_url, requests=10_000_000,
                             output_tokens=4)
        await poll_until(client, started["run_id"], lambda s: s["completed"] >= 2)
        return started["run_id"]

    run_id = session(options(tmp_path), body)
    record = json.loads((tmp_path / "work" / "runs" / run_id / "run.json").read_text())
    results = json.loads((tmp_path / "work" / "runs" / run_id / "results.json").read_text())
    assert record["state"] == "cancelled"
    assert results["partial"] is True and results["levels"][0]["requests"]["completed"] >= 2


def test_start_run_slo_search_stays_under_the_servers_concurrency_limit(tmp_path, sim_url):
    async def body(client):
        bad = await call_error(client, "start_run", target=sim_url, profile="slo-search")
        started = await call(client, "start_run", target=sim_url, profile="slo-search",
                             slos=["ttft_ms:p99<=5000"], output_tokens=4)
        await poll_until_ended(client, started["run_id"])
        return bad, started, await call(client, "get_results", run_id=started["run_id"])

    bad, started, results = session(options(tmp_path, max_concurrency=4), body)
    assert "needs at least one --slo" in bad
    assert any("at most concurrency 4" in note for note in started["notes"])
    search = results["profile"]
    assert [p["load"] for p in search["probes"]] == [1, 2, 4]  # doubling, capped at 4
    assert search["knee"] == 4 and search["stopped"] == "ceiling reached"
    assert all(level["goodput"]["slos"] == ["ttft_ms:p99<=5000"] for level in results["levels"])
