"""vLLM /metrics: facts and live gauges from real-format exposition text, served by a real aiohttp server."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from loadgen.cli.endpoint import facts as facts_command
from loadgen.errors import TargetError
from loadgen.vllm.facts import FACT_KEYS
from loadgen.vllm.server_metrics import (
    ServerMetricsSampler,
    facts_from_metrics,
    fetch_server_facts,
    load_gauges,
    metrics_url,
    parse_metrics,
)

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

METRICS = Path(__file__).parent / "fixtures" / "vllm_metrics"
OLD = (METRICS / "vllm-0.8.5.metrics.txt").read_text()
NEW = (METRICS / "vllm-0.27.1.metrics.txt").read_text()


class MetricsServer:
    """aiohttp on 127.0.0.1 (own loop, background thread); ``/metrics`` answers ``respond(n)``."""

    def __init__(self, respond, status: int = 200, content_type: str = "text/plain") -> None:
        self.respond = respond
        self.status = status
        self.content_type = content_type
        self.hits = 0
        self._ready = threading.Event()

    async def _metrics(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(text=self.respond(self.hits), status=self.status, content_type=self.content_type)

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def __enter__(self) -> "MetricsServer":
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def with_running(text: str, running: int) -> str:
    """The fixture with ``vllm:num_requests_running`` set to ``running``."""
    lines = []
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            line = line.rsplit(" ", 1)[0] + f" {float(running)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# pure parsing


def test_old_version_kv_tokens_are_blocks_times_block_size():
    facts = facts_from_metrics(parse_metrics(OLD))
    assert facts.kv_cache_tokens == 6107 * 16
    assert facts.max_concurrency is None  # 0.8.5 does not export it


def test_new_version_uses_kv_cache_size_tokens_and_max_concurrency():
    facts = facts_from_metrics(parse_metrics(NEW))
    assert facts.kv_cache_tokens == 723_484  # not 45217 * 16 = 723,472
    assert facts.max_concurrency == 176.63


def test_gauges_old_and_new_kv_usage_names():
    old, new = load_gauges(parse_metrics(OLD)), load_gauges(parse_metrics(NEW))
    assert (old["kv_cache_metric"], old["kv_cache_usage_perc"]) == ("vllm:gpu_cache_usage_perc", 0.1737)
    assert (new["kv_cache_metric"], new["kv_cache_usage_perc"]) == ("vllm:kv_cache_usage_perc", 0.0905)
    assert (new["num_requests_running"], new["num_requests_waiting"], new["num_preemptions"]) == (16.0, 2.0, 3.0)


def test_data_parallel_engines_add_up():
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 5.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4\n'
    )
    metrics = parse_metrics(text)
    assert facts_from_metrics(metrics).kv_cache_tokens == 32_000
    gauges = load_gauges(metrics)
    assert gauges["num_requests_running"] == 8.0 and gauges["kv_cache_usage_perc"] == pytest.approx(0.3)


def test_cache_config_before_the_kv_cache_exists_gives_null():
    text = '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    assert facts_from_metrics(parse_metrics(text)).kv_cache_tokens is None


def test_garbage_is_a_one_line_target_error():
    with pytest.raises(TargetError, match="not return Prometheus text"):
        parse_metrics('{"detail": "Not Found"}')


@pytest.mark.parametrize(
    "given, expected",
    [
        ("http://h:8000", "http://h:8000/metrics"),
        ("http://h:8000/", "http://h:8000/metrics"),
        ("http://h:8000/v1", "http://h:8000/metrics"),
        ("http://h:8000/proxy/v1/", "http://h:8000/proxy/metrics"),
        ("http://h:8000/metrics", "http://h:8000/metrics"),
    ],
)
def test_metrics_url(given, expected):
    assert metrics_url(given) == expected


# ---------------------------------------------------------------------------
# against a real HTTP server


def test_fetch_server_facts_returns_the_fact_keys():
    with MetricsServer(lambda n: NEW) as server:
        facts = asyncio.run(fetch_server_facts(server.url + "/v1"))
    assert list(facts) == list(FACT_KEYS)
    assert facts["kv_cache_tokens"] == 723_484 and facts["weights_load_s"] is None


def test_fetch_server_facts_errors_are_one_line():
    with MetricsServer(lambda n: "not found", status=404) as server:
        with pytest.raises(TargetError, match="HTTP 404"):
            asyncio.run(fetch_server_facts(server.url))
    with MetricsServer(lambda n: OLD.replace("vllm:", "other:")) as server:
        with pytest.raises(TargetError, match="no vllm"):
            asyncio.run(fetch_server_facts(server.url))
    with MetricsServer(lambda n: "") as server:
        closed_url = server.url
    with pytest.raises(TargetError, match="cannot read"):
        asyncio.run(fetch_server_facts(closed_url, timeout_s=2))


async def _sample_until(sampler: ServerMetricsSampler, scrapes: int, limit_s: float = 10.0) -> dict:
    task = asyncio.create_task(sampler.run())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while sampler.scrapes + sum(sampler.errors.values()) < scrapes and loop.time() < deadline:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return sampler.snapshot()


def test_sampler_records_gauges_and_summaries():
    with MetricsServer(lambda n: with_running(NEW, n)) as server:
        sampler = ServerMetricsSampler(server.url, interval_s=0.01)
        snap = asyncio.run(_sample_until(sampler, 12))
    json.dumps(snap)  # JSON-able
    assert snap["scrapes"] >= 12 and snap["errors"] == {}
    samples = snap["samples"]
    assert len(samples["t_s"]) == len(samples["num_requests_running"]) == snap["scrapes"]
    assert samples["t_s"] == sorted(samples["t_s"])
    assert samples["num_requests_running"][:3] == [1.0, 2.0, 3.0]  # one scrape per server hit
    assert snap["summary"]["num_requests_running"]["max"] == float(snap["scrapes"])
    assert snap["summary"]["num_requests_waiting"] == {"max": 2.0, "mean": 2.0}
    assert snap["kv_cache_metric"] == "vllm:kv_cache_usage_perc" and snap["preemptions"] == 0.0


def test_sampler_memory_is_bounded_but_summaries_see_every_scrape():
    with MetricsServer(lambda n: with_running(OLD, n)) as server:
        sampler = ServerMetricsSampler(server.url, interval_s=0.005, max_samples=8)
        snap = asyncio.run(_sample_until(sampler, 40))
    kept = snap["samples"]["num_requests_running"]
    assert snap["scrapes"] >= 40 and len(kept) < 8
    assert snap["sample_every"] >= 4
    assert kept[0] == 1.0 and kept == sorted(kept)  # evenly thinned, in order
    assert snap["summary"]["num_requests_running"]["max"] == float(snap["scrapes"])
    assert snap["kv_cache_metric"] == "vllm:gpu_cache_usage_perc"


def test_sampler_counts_errors_and_never_raises():
    with MetricsServer(lambda n: "") as server:
        closed_url = server.url
    sampler = ServerMetricsSampler(closed_url, interval_s=0.01, timeout_s=1)
    snap = asyncio.run(_sample_until(sampler, 3))
    assert snap["scrapes"] == 0 and sum(snap["errors"].values()) >= 3
    assert snap["last_error"] and "\n" not in snap["last_error"]
    assert snap["summary"]["num_requests_running"] == {"max": None, "mean": None}


def test_cli_facts_url():
    with MetricsServer(lambda n: OLD) as server:
        result = CliRunner().invoke(facts_command, ["--url", server.url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache_tokens"] == 97_712
