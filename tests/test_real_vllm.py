"""loadgen against a real vLLM engine (vLLM's CPU build serving a tiny random-weight Llama).

Skipped unless ``LOADGEN_VLLM_PYTHON`` names a Python with vLLM installed
(``scripts/install-vllm-cpu.sh`` makes one); CI does not set it: installing vLLM and
starting it take ~6 min and ~2 min here (BENCHMARKS.md, "Real vLLM engine"). Run them
with ``benchmarks/real_vllm.py`` (one command: model, engine, these tests, a table).

One engine per session, started and stopped through loadgen's own server manager
(:mod:`loadgen.servers`). Every check compares loadgen's view with the engine's own:
its ``usage``, its ``/metrics`` counters and histograms (deltas around each workload),
its startup log. ``LOADGEN_VLLM_MODEL``: a model directory to serve (default: a tiny
model written by ``scripts/make-tiny-model`` into a temporary directory);
``LOADGEN_REAL_VLLM_REPORT``: a JSON file the measured numbers are written to (the
benchmark prints them); ``LOADGEN_VLLM_SERVER_DIR``: the run directory of an engine
already started with ``loadgen server start`` serving ``LOADGEN_VLLM_MODEL`` as ``tiny``
(it is used and left running: quicker when editing these tests).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import loadgen
from loadgen.config import RequestOptions
from loadgen.fidelity import LOGPROBS_AVAILABLE, fidelity_options, run_fidelity
from loadgen.fidelity_tokens import compare_logprobs
from loadgen.record import Prompt, RequestRecord
from loadgen.servers import ServerSpec, find_server, start_server
from loadgen.targets import open_target
from loadgen.targets.openai_http import OpenAIHTTPTarget
from loadgen.vllm.facts import facts_from_log_file
from loadgen.vllm.server_metrics import facts_from_metrics, load_gauges, parse_metrics
from loadgen.workload.settings import WorkloadSettings

VLLM_PYTHON = os.environ.get("LOADGEN_VLLM_PYTHON")
REPO = Path(__file__).resolve().parents[1]
SERVED_NAME = "tiny"
READY_TIMEOUT_S = 900.0  # ~90-140 s measured on a loaded 2-core machine

pytestmark = [
    pytest.mark.real_vllm,
    pytest.mark.integration,
    # The session's engine start (minutes) counts against the first test's timeout.
    pytest.mark.timeout(READY_TIMEOUT_S + 300),
    pytest.mark.skipif(not VLLM_PYTHON, reason="real vLLM engine: set LOADGEN_VLLM_PYTHON to "
                       "a Python with vllm (scripts/install-vllm-cpu.sh)"),
]


def vllm_command(python: str, model_dir: str) -> tuple[str, ...]:
    """The engine as the CPU build runs it (its ``vllm`` console script is broken: the
    module instead). float32 and a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``) keep it small."""
    return (python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--served-model-name", "{model}", "--max-model-len", "1024", "--dtype", "float32",
            "--host", "127.0.0.1", "--port", "{port}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def report():
    """The numbers the tests measure, written to ``LOADGEN_REAL_VLLM_REPORT`` at the end."""
    numbers: dict = {}
    yield numbers
    path = os.environ.get("LOADGEN_REAL_VLLM_REPORT")
    if path:
        Path(path).write_text(json.dumps(numbers, indent=2, default=str))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    given = os.environ.get("LOADGEN_VLLM_MODEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([VLLM_PYTHON, str(REPO / "scripts" / "make-tiny-model"), str(out)],
                   check=True, timeout=300, capture_output=True)
    return out


@pytest.fixture(scope="session")
def vllm_server(model_dir, tmp_path_factory, report):
    """One engine for the session, through loadgen's server manager; stopped at the end."""
    if not os.access(VLLM_PYTHON, os.X_OK):
        pytest.fail(f"LOADGEN_VLLM_PYTHON={VLLM_PYTHON} is not an executable Python")
    running = os.environ.get("LOADGEN_VLLM_SERVER_DIR")
    if running:  # one started with `loadgen server start` (serving LOADGEN_VLLM_MODEL): kept
        server = find_server(Path(running))
        if not server.alive():
            pytest.fail(f"LOADGEN_VLLM_SERVER_DIR={running}: no running server there")
        report["time_to_ready_s"] = server.state.time_to_ready_s
        report["facts"] = server.state.facts
        yield server
        return
    spec = ServerSpec(vllm_command(VLLM_PYTHON, str(model_dir)), model=SERVED_NAME, port=0,
                      env={"VLLM_CPU_KVCACHE_SPACE": "1"}, ready_timeout_s=READY_TIMEOUT_S,
                      stop_grace_s=30.0)
    server = start_server(spec, tmp_path_factory.mktemp("vllm-run"))
    report["time_to_ready_s"] = server.state.time_to_ready_s
    report["facts"] = server.state.facts
    report["log"] = str(server.log_file)
    try:
        yield server
    finally:
        state = server.stop()
        report["stop"] = state.stop


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        return parse_metrics(reply.read().decode())


def value(metrics: dict[str, list], sample: str, **labels: str) -> float:
    """Sum of one sample name (``vllm:generation_tokens_total``, ``..._seconds_sum``) over
    engines, restricted to ``labels``."""
    family = sample.removesuffix("_total").removesuffix("_sum").removesuffix("_count")
    return sum(s.value for s in metrics.get(family, []) if s.name == sample
               and all(s.labels.get(k) == v for k, v in labels.items()))


def delta(before: dict, after: dict, sample: str, **labels: str) -> float:
    return value(after, sample, **labels) - value(before, sample, **labels)


def sweep(url: str, model_dir: Path, loads, requests: int, **workload) -> loadgen.Results:
    settings = WorkloadSettings(tokenizer=str(model_dir / "tokenizer.json"), **workload)
    return asyncio.run(loadgen.sweep(url, loads=loads, stop=loadgen.StopRule(requests=requests),
                                     options=RequestOptions(model=SERVED_NAME),
                                     workload=settings, keep_records=True,
                                     server_metrics_interval_s=0.5))


# --------------------------------------------------------------------------- tests


def test_token_counts_and_latencies_agree_with_the_engines_metrics(vllm_server, model_dir,
                                                                    report):
    """Two levels (1 and 4 streams, 8 requests each, 32 tokens with ignore_eos): per level,
    loadgen's counts equal vLLM's ``usage`` and ``/metrics`` counter deltas, and vLLM's
    own TTFT/e2e (measured inside the server) are never above what the client saw."""
    url = vllm_server.url
    snapshots = [scrape(url)]
    results = asyncio.run(_levels_with_snapshots(url, model_dir, snapshots))
    rows = []
    for level, before, after in zip(results.levels, snapshots, snapshots[1:]):
        records = level.records
        assert len(records) == 8 and all(r.ok for r in records), level.requests
        # ignore_eos honoured: exactly max_tokens, and vLLM says it stopped for length.
        assert [r.output_tokens for r in records] == [32] * 8
        assert all(r.tokens_source == "usage" for r in records)
        assert delta(before, after, "vllm:request_success_total", finished_reason="length") == 8
        assert delta(before, after, "vllm:request_success_total") == 8
        generated = delta(before, after, "vllm:generation_tokens_total")
        assert level.output_tokens == generated == 256
        prompt = delta(before, after, "vllm:prompt_tokens_total")
        assert sum(r.server_input_tokens for r in records) == prompt
        # Fewer text chunks than tokens: a token that is part of a UTF-8 character (byte-level
        # BPE) or a special token streams no text of its own, which is why loadgen counts
        # from ``usage`` and never from chunks.
        chunks = sum(len(r.content_ns) for r in records)
        assert 8 <= chunks <= generated
        assert delta(before, after, "vllm:inter_token_latency_seconds_count") == generated - 8
        # Latencies: vLLM's histograms (sum/count deltas) against loadgen's means.
        ttft_s = _mean(before, after, "vllm:time_to_first_token_seconds")
        e2e_s = _mean(before, after, "vllm:e2e_request_latency_seconds")
        itl_s = _mean(before, after, "vllm:inter_token_latency_seconds")
        assert delta(before, after, "vllm:time_to_first_token_seconds_count") == 8
        assert ttft_s <= level.ttft_ms.mean / 1000
        assert e2e_s <= level.e2e_ms.mean / 1000
        # Per token, vLLM's inter-token latency and loadgen's TPOT are reported, not
        # compared: no causal order holds between them (the API server's streaming, on a busy
        # 2-core machine, stretches the client's decode span by up to ~2x at 4 streams).
        rows.append({"concurrency": level.load.get("concurrency"), "requests": len(records),
                     "loadgen_output_tokens": level.output_tokens,
                     "vllm_generation_tokens": generated, "loadgen_chunks": chunks,
                     "loadgen_prompt_tokens": sum(r.server_input_tokens for r in records),
                     "vllm_prompt_tokens": prompt,
                     "vllm_request_success": delta(before, after, "vllm:request_success_total"),
                     "ttft_ms": {"loadgen": level.ttft_ms.mean, "vllm": ttft_s * 1000},
                     "itl_ms": {"loadgen": level.itl_ms.mean, "vllm": itl_s * 1000},
                     "tpot_ms": {"loadgen": level.tpot_ms.mean, "vllm_itl": itl_s * 1000},
                     "e2e_ms": {"loadgen": level.e2e_ms.mean, "vllm": e2e_s * 1000}})
        # The server timeline found vLLM 0.32's gauge names while the level ran.
        timeline = level.data["server_metrics"]
        assert timeline["kv_cache_metric"] == "vllm:kv_cache_usage_perc"
        assert timeline["scrapes"] >= 1 and not timeline["errors"]
        assert all(timeline["summary"][name]["max"] is not None
                   for name in ("num_requests_running", "num_requests_waiting",
                                "kv_cache_usage_perc"))
    report["levels"] = rows


async def _levels_with_snapshots(url: str, model_dir: Path, snapshots: list) -> loadgen.Results:
    settings = WorkloadSettings(tokenizer=str(model_dir / "tokenizer.json"), input_tokens=64,
                                output_tokens=32)
    return await loadgen.sweep(
        url, loads=[loadgen.ConstantConcurrency(1), loadgen.ConstantConcurrency(4)],
        stop=loadgen.StopRule(requests=8), options=RequestOptions(model=SERVED_NAME),
        workload=settings, keep_records=True, server_metrics_interval_s=0.5,
        on_level=lambda level: snapshots.append(scrape(url)))


def _mean(before: dict, after: dict, histogram: str) -> float:
    count = delta(before, after, histogram + "_count")
    return delta(before, after, histogram + "_sum") / count


def test_the_metrics_parser_reads_running_waiting_and_kv_usage(vllm_server):
    metrics = scrape(vllm_server.url)
    gauges = load_gauges(metrics)
    assert gauges["kv_cache_metric"] == "vllm:kv_cache_usage_perc"
    assert gauges["num_requests_running"] is not None
    assert gauges["num_requests_waiting"] is not None
    assert 0.0 <= gauges["kv_cache_usage_perc"] <= 1.0
    assert gauges["num_preemptions"] is not None


def test_facts_from_the_real_startup_log_match_its_metrics(vllm_server, model_dir, report):
    """The manager's facts (parsed from the engine's own log) agree with what the running
    engine says in /metrics and with the version installed."""
    facts = vllm_server.state.facts
    version = subprocess.run([VLLM_PYTHON, "-c", "import vllm; print(vllm.__version__)"],
                             check=False, capture_output=True, text=True, timeout=300).stdout.split()[-1]
    from_metrics = facts_from_metrics(scrape(vllm_server.url))
    assert facts["vllm_version"] == version
    assert facts["model"] == str(model_dir)
    assert (facts["dtype"], facts["max_model_len"]) == ("float32", 1024)
    assert facts["max_concurrency_tokens_per_request"] == 1024
    assert facts["kv_cache_tokens"] == from_metrics.kv_cache_tokens
    assert facts["max_concurrency"] == from_metrics.max_concurrency
    assert facts["kv_cache_gib"] == 1.0  # VLLM_CPU_KVCACHE_SPACE=1
    assert facts["engine_init_s"] > 0 and facts["weights_load_s"] >= 0
    assert facts == {k: v for k, v in facts_from_log_file(str(vllm_server.log_file), "log")
                     .to_dict().items() if v is not None}
    report["version"] = version


def test_a_shared_prefix_workload_hits_the_prefix_cache(vllm_server, model_dir, report):
    """6 prompts sharing their first 300 tokens hit vLLM's prefix cache (in 128-token
    blocks: >= 256 tokens each after the first); 6 prompts without a shared prefix don't."""
    url = vllm_server.url
    hits = {}
    for shared in (0, 300):
        before = scrape(url)
        results = sweep(url, model_dir, [loadgen.ConstantConcurrency(1)], 6, input_tokens=400,
                        output_tokens=4, shared_prefix_tokens=shared)
        after = scrape(url)
        assert all(r.ok for r in results.levels[0].records)
        hits[shared] = delta(before, after, "vllm:prefix_cache_hits_total")
    assert hits[0] == 0
    assert hits[300] >= 5 * 256
    report["prefix_cache_hits"] = {"no_shared_prefix": hits[0], "shared_prefix_300": hits[300]}


def test_logprobs_from_the_engine_through_the_fidelity_path(vllm_server, report):
    """The fidelity suite twice against the same engine: logprobs available, every token
    with its top-5, and the engine agrees with itself (top-1 1.0, KL ~ 0)."""
    async def once():
        options = fidelity_options(RequestOptions(model=SERVED_NAME))
        async with open_target(OpenAIHTTPTarget(vllm_server.url, options)) as target:
            return await run_fidelity(target, options, max_tokens=8, top_logprobs=5)

    first, second = asyncio.run(once()), asyncio.run(once())
    assert first.logprobs == second.logprobs == LOGPROBS_AVAILABLE
    assert first.errors == second.errors == 0
    for answer in first.answers:
        assert answer.logprobs and len(answer.logprobs) <= 8
        assert all(len(top) == 5 and logprob <= 0 for _, logprob, top in answer.logprobs)
    # A token that streams no text of its own (part of a UTF-8 character) still gets its
    # logprob: one entry per generated token, as many as vLLM's usage counts.
    options = RequestOptions(model=SERVED_NAME, keep_text=True)
    record = asyncio.run(_send(vllm_server.url, options, Prompt("the sea", max_tokens=48,
                                                                  top_logprobs=5)))
    assert record.ok and record.tokens_source == "usage"
    assert len(record.logprobs) == record.output_tokens == 48
    comparison = compare_logprobs([(a.question.id, a.logprobs, b.logprobs)
                                   for a, b in zip(first.answers, second.answers)])
    assert comparison["compared_questions"] == 40
    assert comparison["top1_agreement"] == 1.0
    assert comparison["kl_mean"] < 1e-3
    report["fidelity"] = {k: comparison[k] for k in ("compared_questions", "positions",
                                                     "identical_token_sequences",
                                                     "top1_agreement", "kl_mean")}


async def _send(url: str, options: RequestOptions, prompt: Prompt) -> RequestRecord:
    record = RequestRecord()
    async with open_target(OpenAIHTTPTarget(url, options)) as target:
        await target.send(prompt, record)
    return record


if __name__ == "__main__":  # pragma: no cover - run as pytest
    sys.exit(pytest.main([__file__, "-q"]))
