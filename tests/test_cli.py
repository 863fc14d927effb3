"""The `loadgen run` / `loadgen sweep` command line: output, results file, one-line errors."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from aiohttp import web
from click.testing import CliRunner

from loadgen.cli.main import cli
from loadgen.simulator import SimProfile

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

LEVEL_KEYS = {"load", "requests", "duration_s", "output_tokens", "input_tokens",
              "output_tokens_per_s", "requests_per_s", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms",
              "decode_tokens_per_s", "histograms", "client"}
STAT_KEYS = {"count", "min", "mean", "p50", "p90", "p99", "max"}


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    for fragment in fragments:
        assert fragment in text


def test_sweep_prints_table_and_writes_results_file(sim_url, tmp_path):
    out = tmp_path / "r.json"
    result = invoke("sweep", "--target", sim_url, "--concurrency", "1,2", "--requests", "4",
                    "--output-tokens", "6", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "out tok/s" in result.output and "c=2" in result.output
    data = json.loads(out.read_text())
    assert {"loadgen_version", "target", "started_at", "levels"} <= set(data)
    assert data["target"]["url"] == sim_url and data["target"]["api"] == "chat"
    assert len(data["levels"]) == 2
    for level in data["levels"]:
        assert LEVEL_KEYS <= set(level)
        for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s"):
            assert set(level[metric]) == STAT_KEYS
        assert level["requests"]["completed"] == 4


def test_run_open_loop_rate(sim_url, tmp_path):
    out = tmp_path / "r.json"
    result = invoke("run", "--target", sim_url, "--rate", "20", "--arrival", "poisson",
                    "--requests", "5", "--output-tokens", "4", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    load = json.loads(out.read_text())["levels"][0]["load"]
    assert load == {"mode": "rate", "concurrency": None, "rate": 20.0, "arrival": "poisson"}


def test_prompts_file(sim_url, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello"}\n"plain string"\n')
    out = tmp_path / "r.json"
    result = invoke("run", "--target", sim_url, "--prompts", str(prompts), "--requests", "3",
                    "--output-tokens", "4", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["levels"][0]["requests"]["completed"] == 3


@pytest.mark.parametrize("args, fragment", [
    (["--target", "ftp://example"], "is not a URL"),
    (["--target", "http://127.0.0.1:1"], "cannot connect"),
    (["--concurrency", "2", "--rate", "3"], "not both"),
    (["--concurrency", "x"], "a number"),
    (["--requests", "0"], "--requests must be >= 1"),
    (["--concurrency", "1,2"], "use `loadgen sweep`"),
    (["--target", "http://127.0.0.1:1", "--region", "us-east-1"], "only apply to sagemaker"),
])
def test_bad_input_is_one_clear_line(args, fragment, tmp_path):
    result = invoke("run", *args, "--out", str(tmp_path / "r.json"))
    assert_one_line_error(result, "Error:", fragment)


def test_malformed_prompts_file_names_the_line(sim_url, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{broken\n')
    result = invoke("run", "--target", sim_url, "--prompts", str(prompts))
    assert_one_line_error(result, "p.jsonl:2")


def test_unknown_model_lists_served_models(sim_url):
    result = invoke("run", "--target", sim_url, "--model", "nope", "--requests", "1")
    assert_one_line_error(result, "'nope' is not served", "loadgen-sim")


@pytest.fixture
def not_openai_url():
    """A real HTTP server that is not an OpenAI API (404 everywhere)."""
    import asyncio

    from aiohttp.test_utils import unused_port

    port = unused_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(web.Application())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_non_openai_server_is_one_clear_line(not_openai_url):
    result = invoke("run", "--target", not_openai_url, "--requests", "1")
    assert_one_line_error(result, "not an OpenAI-compatible server", "404")


def test_401_without_key_is_one_clear_line(start_sim, monkeypatch):
    url = start_sim(api_key="sk-secret-value")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = invoke("run", "--target", url, "--requests", "1")
    assert_one_line_error(result, "401", "OPENAI_API_KEY")
    assert "sk-secret-value" not in result.output


def test_ctrl_c_writes_partial_results(start_sim, tmp_path):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.05))
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "sweep", "--target", url, "--concurrency", "2,4",
         "--requests", "100", "--output-tokens", "40", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in proc.stdout:  # the target header: the load starts now
        if "model=" in line:
            break
    while start_sim.threads[0].simulator.statistics()["requests_received"] < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    data = json.loads(out.read_text())
    assert data["partial"] is True and len(data["levels"]) == 1
    level = data["levels"][0]
    assert level["partial"] is True and level["requests"]["incomplete"] == 2


def test_no_stream_says_ttft_is_the_full_latency(sim_url, tmp_path):
    result = invoke("run", "--target", sim_url, "--no-stream", "--requests", "2",
                    "--output-tokens", "4", "--out", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "non-streaming: TTFT is the full latency" in result.output
    assert json.loads((tmp_path / "r.json").read_text())["target"]["stream"] is False
