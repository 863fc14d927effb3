"""Servers that close connections, bursts, and send lag: every request completes, and says so."""

from __future__ import annotations

import asyncio

import pytest

import loadgen
from loadgen.config import RequestOptions
from loadgen.simulator import SimProfile

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

QUICK = dict(ttft_s=0.005, itl_s=0.001)


def _level(url: str, load, transport: str = "stream", requests: int = 12,
           duration: float | None = None, tokens: int = 8) -> dict:
    stop = loadgen.StopRule(requests=requests, duration_s=duration)
    result = asyncio.run(asyncio.wait_for(loadgen.sweep(
        url, loads=[load], stop=stop, options=RequestOptions(transport=transport),
        prompts=loadgen.PromptSource(16, tokens), server_metrics_interval_s=None), 60))
    return result.to_dict()["levels"][0]


@pytest.mark.parametrize("transport", ["stream", "aiohttp"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_server_closing_after_each_response_fails_nothing(start_sim, transport, concurrency):
    # llama.cpp's server: keep-alive headers, then a closed socket after every stream.
    url = start_sim(SimProfile(**QUICK, close_after_response=True))
    level = _level(url, loadgen.ConstantConcurrency(concurrency), transport)
    assert level["requests"]["completed"] == 12 and level["requests"]["failed"] == 0
    conns = level["connections"]
    if transport == "stream":
        # Every later request needed a new connection: noticed while idle, or retried.
        assert conns["connections_opened"] + conns["reconnects"] >= 12 - concurrency
        assert conns["connect_failures"] == 0


@pytest.mark.parametrize("transport", ["stream", "aiohttp"])
def test_connection_close_header_is_honoured(start_sim, transport):
    url = start_sim(SimProfile(**QUICK, connection_close=True))
    level = _level(url, loadgen.ConstantConcurrency(2), transport)
    assert level["requests"]["completed"] == 12 and level["requests"]["failed"] == 0
    if transport == "stream":
        # Closed by us after each answer, so no request ever meets a dead connection.
        assert level["connections"]["reconnects"] == 0
        assert level["connections"]["connections_opened"] >= 10


def test_idle_connections_closed_by_the_server_are_replaced(start_sim):
    url = start_sim(SimProfile(**QUICK, keepalive_timeout_s=0.05))
    # 5 requests/s: every connection sits idle ~200 ms between requests, longer than 50 ms.
    level = _level(url, loadgen.ArrivalRate(5.0, max_in_flight=2), requests=6)
    assert level["requests"]["completed"] == 6 and level["requests"]["failed"] == 0
    conns = level["connections"]
    assert conns["closed_by_server"] + conns["reconnects"] >= 3


def test_both_transports_count_the_same_requests_and_tokens(start_sim):
    # One simulator each, same seed: request number k gets the same fault on both.
    levels = [_level(start_sim(SimProfile(**QUICK, fault_500=0.2, seed=3)),
                     loadgen.ConstantConcurrency(3), t, requests=30) for t in ("stream", "aiohttp")]
    stream, aio = levels
    for key in ("completed", "failed"):
        assert stream["requests"][key] + aio["requests"][key] > 0
    assert stream["requests"]["completed"] + stream["requests"]["failed"] == 30
    assert aio["requests"]["completed"] + aio["requests"]["failed"] == 30
    # Same seed, same request order: the simulator fails the same request numbers.
    assert stream["requests"]["errors"] == aio["requests"]["errors"]
    assert stream["output_tokens"] == aio["output_tokens"] == 8 * stream["requests"]["completed"]


def test_burst_of_256_streams_completes_and_reports_send_lag(start_sim):
    url = start_sim(SimProfile(ttft_s=0.02, itl_s=0.005, batch_slowdown=0.0,
                               max_num_seqs=512, events_per_write=64))
    level = _level(url, loadgen.ConstantConcurrency(256), requests=512, tokens=4)
    assert level["requests"]["completed"] == 512 and level["requests"]["failed"] == 0
    lag = level["send_lag_ms"]
    assert lag["count"] == 512 and lag["min"] >= 0
    assert level["connections"]["connections_opened"] == 0  # all 256 opened before the level
    assert level["ttft_ms"]["min"] >= lag["min"]  # TTFT includes the client's own delay


def test_too_few_open_files_for_the_load_is_one_clear_line(start_sim, tmp_path):
    import resource
    import subprocess
    import sys

    url = start_sim(SimProfile(**QUICK))

    def limit_files() -> None:  # only in the child: this test process keeps its own limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    done = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--target", url,
                           "--concurrency", "300", "--requests", "300", "--workers", "1",
                           "--out", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=60, preexec_fn=limit_files)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "ulimit -n" in lines[0] and "Traceback" not in done.stderr
