"""The built-in simulator, spoken to with a raw aiohttp client (not loadgen's target)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from loadgen.cli.simulator import mock_server_command
from loadgen.errors import ConfigError
from loadgen.simulator import (
    PROFILES,
    SimProfile,
    simulator_process,
    split_tokens,
    start_simulator,
)
from loadgen.simulator.clock import TokenClock
from loadgen.simulator.plan import SimRequest, plan_response
from loadgen.simulator.state import RequestLogEntry, SimState

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
TIMEOUT = aiohttp.ClientTimeout(total=20)


def chat_body(max_tokens=8, stream=True, content="hello there", **extra) -> dict:
    body = {"model": "loadgen-sim", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "stream": stream, **extra}
    if stream:
        body.setdefault("stream_options", {"include_usage": True})
    return body


async def _request(method, url, body=None, headers=None):
    """(status, headers, body bytes, arrival time of each read)."""
    reads = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.request(method, url, json=body, headers=headers) as resp:
            chunks = []
            async for chunk in resp.content.iter_any():
                reads.append(time.perf_counter())
                chunks.append(chunk)
            return resp.status, resp.headers, b"".join(chunks), reads


def request(method, url, body=None, headers=None):
    return asyncio.run(_request(method, url, body, headers))


def post(url, body, headers=None):
    return request("POST", url, body, headers)


def events(raw: bytes) -> list:
    """SSE ``data:`` payloads, JSON-decoded except ``[DONE]``."""
    out = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            data = block[len(b"data: "):]
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


def get_json(url):
    return orjson.loads(request("GET", url)[2])


# --- wire format --------------------------------------------------------------------------

def test_models_and_health(sim_url):
    models = get_json(sim_url + "/v1/models")
    assert [m["id"] for m in models["data"]] == ["loadgen-sim"]
    assert request("GET", sim_url + "/health")[0] == 200


def test_chat_stream_chunks_in_vllm_order(sim_url):
    status, headers, raw, _ = post(sim_url + CHAT, chat_body(max_tokens=6, ignore_eos=True),
                                   {"X-Request-Id": "req-chat-1"})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert headers["X-Request-Id"] == "req-chat-1"
    got = events(raw)
    role, content, usage, done = got[0], got[1:-2], got[-2], got[-1]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(content) == 6
    assert all(set(c["choices"][0]["delta"]) == {"content"} for c in content)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 5 + ["length"]
    assert "stop_reason" in content[-1]["choices"][0]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 6
    assert done == "[DONE]"
    assert {c["id"] for c in got[:-1]} == {"chatcmpl-req-chat-1"}
    assert {c["object"] for c in got[:-1]} == {"chat.completion.chunk"}


def test_completions_stream_uses_text(sim_url):
    body = {"prompt": "Once upon", "max_tokens": 4, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    got = events(post(sim_url + COMPLETIONS, body)[2])
    assert got[-1] == "[DONE]" and got[-2]["usage"]["completion_tokens"] == 4
    content = got[:-2]
    assert len(content) == 4 and all(c["object"] == "text_completion" for c in content)
    assert all(c["choices"][0]["text"] for c in content)
    assert content[-1]["choices"][0]["finish_reason"] == "length"


def test_continuous_usage_is_cumulative_on_every_chunk(sim_url):
    body = chat_body(max_tokens=5, ignore_eos=True,
                     stream_options={"include_usage": True, "continuous_usage_stats": True})
    got = events(post(sim_url + CHAT, body)[2])[:-1]
    assert [c["usage"]["completion_tokens"] for c in got] == [0, 1, 2, 3, 4, 5, 5]


def test_without_include_usage_there_is_no_usage_chunk(sim_url):
    got = events(post(sim_url + CHAT, chat_body(max_tokens=3, stream_options=None))[2])
    assert got[-1] == "[DONE]" and all(c["choices"] for c in got[:-1])


def test_non_streaming_chat_and_completions(sim_url):
    status, headers, raw, _ = post(sim_url + CHAT, chat_body(max_tokens=7, stream=False,
                                                             ignore_eos=True))
    body = orjson.loads(raw)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 7 and body["choices"][0]["finish_reason"] == "length"
    assert len(split_tokens(body["choices"][0]["message"]["content"])) == 7
    assert headers["X-Request-Id"]
    body = orjson.loads(post(sim_url + COMPLETIONS, {"prompt": "x", "max_tokens": 2})[2])
    assert body["object"] == "text_completion" and body["usage"]["completion_tokens"] == 2


# --- lengths and the responder ----------------------------------------------------------

def _answer(url, **body_fields):
    got = events(post(url + CHAT, chat_body(**body_fields))[2])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in got[:-1] if c["choices"])
    finish = [c["choices"][0]["finish_reason"] for c in got[:-1] if c["choices"]][-1]
    return text, got[-2]["usage"]["completion_tokens"], finish


def test_responder_text_eos_min_tokens_and_max_tokens(start_sim):
    url = start_sim(responder=lambda prompt: f"You said: {prompt}.")
    assert _answer(url, max_tokens=50, content="hi") == ("You said: hi.", 5, "stop")
    text, tokens, finish = _answer(url, max_tokens=50, min_tokens=9, content="hi")
    assert text.startswith("You said: hi.") and tokens == 9 and finish == "stop"
    assert _answer(url, max_tokens=3, content="hi") == ("You said:", 3, "length")
    text, tokens, finish = _answer(url, max_tokens=12, ignore_eos=True, content="hi")
    assert tokens == 12 and finish == "length"


def test_early_stop_without_ignore_eos_is_deterministic(start_sim):
    url = start_sim(SimProfile(ttft_s=0.0, itl_s=0.0))
    first = _answer(url, max_tokens=2000, content="same prompt")
    assert first == _answer(url, max_tokens=2000, content="same prompt")
    assert 128 <= first[1] <= 384 and first[2] == "stop"  # natural_tokens 256 +- 50 %


@settings(max_examples=50, deadline=None)
@given(st.text())
def test_split_tokens_joins_back(text):
    assert "".join(split_tokens(text)) == text


# --- errors -------------------------------------------------------------------------------

def test_api_key_required_on_v1_only(start_sim):
    url = start_sim(api_key="s3cret")
    assert post(url + CHAT, chat_body())[0] == 401
    status, _, raw, _ = post(url + CHAT, chat_body(), {"Authorization": "Bearer wrong"})
    assert status == 401 and orjson.loads(raw) == {"error": "Unauthorized"}
    assert post(url + CHAT, chat_body(), {"Authorization": "Bearer s3cret"})[0] == 200
    assert request("GET", url + "/health")[0] == 200


@pytest.mark.parametrize("body, status, fragment", [
    (chat_body(model="nope"), 404, "The model `nope` does not exist."),
    (chat_body(stream=False, stream_options={"include_usage": True}), 400, "stream=True"),
    (chat_body(max_tokens=0), 400, "max_tokens must be at least 1"),
    (chat_body(max_tokens=40000), 400, "maximum context length"),
    ({"model": "loadgen-sim", "messages": []}, 400, "messages"),
])
def test_bad_requests_get_vllm_errors(sim_url, body, status, fragment):
    got_status, _, raw, _ = post(sim_url + CHAT, body)
    error = orjson.loads(raw)["error"]
    assert got_status == status and error["code"] == status and fragment in error["message"]


# --- faults -------------------------------------------------------------------------------

@pytest.mark.parametrize("fault, status", [("fault_500", 500), ("fault_429", 429)])
def test_http_error_faults(start_sim, fault, status):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.001, **{fault: 1.0}))
    got_status, _, raw, _ = post(url + CHAT, chat_body())
    assert got_status == status and orjson.loads(raw)["error"]["code"] == status
    stats = get_json(url + "/sim/stats")
    assert stats["faults_injected"] == {f"http_{status}": 1}


def test_disconnect_fault_cuts_the_stream(start_sim):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.001, fault_disconnect=1.0))
    with pytest.raises(aiohttp.ClientPayloadError):
        post(url + CHAT, chat_body(max_tokens=50, ignore_eos=True))
    [entry] = get_json(url + "/sim/log")
    assert entry["fault"] == "disconnect" and 1 <= entry["tokens"] < 50


def test_stall_fault_pauses_mid_stream(start_sim):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.002, fault_stall=1.0, stall_s=0.3))
    status, _, raw, reads = post(url + CHAT, chat_body(max_tokens=20, ignore_eos=True))
    assert status == 200 and events(raw)[-1] == "[DONE]"
    gaps = [b - a for a, b in zip(reads, reads[1:])]
    assert max(gaps) >= 0.25


def test_fault_choice_is_seeded_and_deterministic(start_sim):
    profile = SimProfile(ttft_s=0.0, itl_s=0.0, fault_500=0.5, seed=7)
    statuses = []
    for url in (start_sim(profile), start_sim(profile)):
        statuses.append([post(url + CHAT, chat_body(max_tokens=2))[0] for _ in range(16)])
    assert statuses[0] == statuses[1] and {200, 500} == set(statuses[0])


# --- observability ------------------------------------------------------------------------

def test_request_log_and_stats(start_sim):
    url = start_sim()
    post(url + CHAT, chat_body(max_tokens=10, ignore_eos=True), {"X-Request-Id": "logged-1"})
    [entry] = get_json(url + "/sim/log")
    assert entry["request_id"] == "logged-1" and entry["tokens"] == 10
    assert entry["received_ns"] < entry["first_content_write_ns"] < entry["last_write_ns"]
    assert entry["last_write_ns"] < time.perf_counter_ns()  # same clock as ours
    stats = get_json(url + "/sim/stats")
    assert stats["requests_received"] == 1 and stats["tokens_sent"] == 10
    assert stats["bytes_sent"] > 10 * 100 and stats["cpu_s"] > 0


def test_request_log_is_bounded():
    state = SimState(SimProfile(), log_size=3)
    for i in range(5):
        state.finish(RequestLogEntry(f"r{i}", i))
    assert [e["request_id"] for e in state.log_entries()] == ["r2", "r3", "r4"]


def _metrics(url) -> dict:
    text = request("GET", url + "/metrics")[2].decode()
    return {s.name: s for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_are_live_vllm_gauges(start_sim):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.02, max_num_seqs=2, num_gpu_blocks=100))
    # Two streams of 25 tokens run for ~0.5 s while the third waits for a slot.

    async def scrape_later():
        await asyncio.sleep(0.25)
        return (await _request("GET", url + "/metrics"))[2].decode()

    async def scrape_while_busy():
        streams = [_request("POST", url + CHAT, chat_body(max_tokens=25, ignore_eos=True))
                   for _ in range(3)]
        return (await asyncio.gather(scrape_later(), *streams))[0]

    text = asyncio.run(scrape_while_busy())
    busy = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    assert busy["vllm:num_requests_running"].value == 2
    assert busy["vllm:num_requests_waiting"].value == 1
    assert 0 < busy["vllm:kv_cache_usage_perc"].value <= 1
    assert busy["vllm:num_requests_running"].labels["model_name"] == "loadgen-sim"
    idle = _metrics(url)
    assert idle["vllm:num_requests_running"].value == 0
    assert idle["vllm:generation_tokens_total"].value == 75
    info = idle["vllm:cache_config_info"].labels
    assert (info["block_size"], info["num_gpu_blocks"]) == ("16", "100")


# --- timing model -------------------------------------------------------------------------

def _server_itl(url, streams: int, tokens: int = 30) -> float:
    """Mean ITL the server produced across ``streams`` concurrent streams (from /sim/log)."""
    async def run():
        await asyncio.gather(*[_request("POST", url + CHAT, chat_body(max_tokens=tokens,
                                                                      ignore_eos=True))
                               for _ in range(streams)])
    asyncio.run(run())
    log = get_json(url + "/sim/log")[-streams:]
    return sum((e["last_write_ns"] - e["first_content_write_ns"]) / (tokens - 1) for e in log) \
        / streams / 1e9


def test_itl_grows_with_active_streams(start_sim):
    url = start_sim(SimProfile(ttft_s=0.005, itl_s=0.005, batch_slowdown=0.25, max_num_seqs=16))
    single, batched = _server_itl(url, 1), _server_itl(url, 8)
    assert batched > 1.5 * single  # model: 1 + 0.25 * 7 = 2.75x


def test_saturation_curve_rises_then_flattens():
    profile = PROFILES["default"]
    rates = [profile.throughput_at(c) for c in (1, 4, 16, 64, 256)]
    assert rates[0] < rates[1] < rates[2] < rates[3] == rates[4]
    assert rates[1] / rates[0] > rates[3] / rates[2]


def test_bf16_and_qat_profiles_match_the_published_l4_numbers():
    bf16, qat = PROFILES["bf16"], PROFILES["qat"]
    assert bf16.throughput_at(1) == pytest.approx(51.3, rel=0.01)
    assert qat.throughput_at(1) == pytest.approx(105.1, rel=0.01)
    assert bf16.throughput_at(16) == pytest.approx(619.1, rel=0.05)
    assert qat.throughput_at(16) == pytest.approx(1077.25, rel=0.05)


def test_schedule_is_absolute_so_slow_writes_do_not_drift():
    """3 ms of work per token at a 5 ms ITL must not stretch 60 tokens to 60 * 8 ms."""
    profile = SimProfile(ttft_s=0.0, itl_s=0.005, batch_slowdown=0.0)
    plan = plan_response(SimRequest("chat", True, False, False, "x", 1, 60, 0, True),
                         profile, None, 1)

    async def run():
        clock = TokenClock(SimState(profile), plan, asyncio.get_running_loop().time())
        start = time.perf_counter()
        async for _ in clock.batches(60, 64):
            time.sleep(0.003)  # blocking work on every write
        return time.perf_counter() - start

    assert asyncio.run(run()) < 0.4  # drifting would take >= 0.47 s


def test_fast_mode_writes_many_events_per_read(start_sim):
    url = start_sim(PROFILES["fast"])
    status, _, raw, reads = post(url + CHAT, chat_body(max_tokens=3000, ignore_eos=True))
    assert status == 200 and events(raw)[-2]["usage"]["completion_tokens"] == 3000
    assert len(reads) < 3000 / 8


# --- configuration and runners ------------------------------------------------------------

def test_profile_validation_is_one_line():
    with pytest.raises(ConfigError, match="jitter must be in"):
        SimProfile(jitter=1.5)
    with pytest.raises(ConfigError, match="sum must be <= 1"):
        SimProfile(fault_500=0.6, fault_429=0.6)


def test_refuses_non_loopback_without_allow_remote():
    with pytest.raises(ConfigError, match="allow-remote"):
        asyncio.run(start_simulator(SimProfile(), host="0.0.0.0"))
    result = CliRunner().invoke(mock_server_command, ["--host", "0.0.0.0", "--port", "0"])
    assert isinstance(result.exception, ConfigError) and "--allow-remote" in str(result.exception)


def test_cli_api_key_env_must_be_set(monkeypatch):
    monkeypatch.delenv("SIM_TEST_KEY", raising=False)
    result = CliRunner().invoke(mock_server_command, ["--port", "0", "--api-key-env",
                                                      "SIM_TEST_KEY"])
    assert isinstance(result.exception, ConfigError) and "SIM_TEST_KEY" in str(result.exception)


def test_child_process_runner_serves_and_stops():
    with simulator_process(SimProfile(ttft_s=0.0, itl_s=0.0, model="child-model"),
                           api_key="k") as url:
        assert post(url + CHAT, chat_body(model="child-model"))[0] == 401
        status, _, raw, _ = post(url + CHAT, chat_body(model="child-model", max_tokens=3),
                                 {"Authorization": "Bearer k"})
        assert status == 200 and events(raw)[-1] == "[DONE]"
    with pytest.raises(aiohttp.ClientConnectionError):
        request("GET", url + "/health")


def test_loadgens_own_stream_parser_reads_the_simulator(sim_url):
    from loadgen.codecs.openai_stream import OpenAIStreamParser
    from loadgen.record import TOKENS_FROM_USAGE, RequestRecord

    body = chat_body(max_tokens=9, ignore_eos=True,
                     stream_options={"include_usage": True, "continuous_usage_stats": True})
    raw = post(sim_url + CHAT, body)[2]
    record = RequestRecord()
    parser = OpenAIStreamParser(record, keep_text=True)
    for i in range(0, len(raw), 7):  # arbitrary split points
        parser.feed(raw[i:i + 7], i)
    parser.close(len(raw))
    assert record.ok and record.output_tokens == 9 and record.tokens_source == TOKENS_FROM_USAGE
    assert len(record.content_ns) == 9 and len(split_tokens(record.text)) == 9
