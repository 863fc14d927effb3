"""The engine end to end against the real simulator on 127.0.0.1: counts, warm-up, stops,
errors as data, API modes. Scheduling itself (due times, drops, deadlines, ramp-up) is
asserted exactly, in virtual time, in test_scheduling.py."""

import asyncio
import json
import urllib.request

import pytest

import loadgen
from loadgen.engine import RunControl
from loadgen.errors import AuthError
from loadgen.simulator import SimProfile

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def sweep(url, loads, stop, **kw):
    kw.setdefault("prompts", loadgen.PromptSource(16, 8))
    return asyncio.run(loadgen.sweep(url, loads=loads, stop=stop, **kw))


def stats(url):
    with urllib.request.urlopen(url + "/sim/stats", timeout=5) as resp:
        return json.loads(resp.read())


def test_closed_loop_sweep_counts_levels_and_tokens(sim_url):
    result = sweep(sim_url, [loadgen.ConstantConcurrency(1), loadgen.ConstantConcurrency(4)],
                   loadgen.StopRule(requests=8)).to_dict()
    assert [lv["load"]["concurrency"] for lv in result["levels"]] == [1, 4]
    for lv in result["levels"]:
        assert lv["requests"] == {"completed": 8, "failed": 0, "incomplete": 0, "dropped": 0,
                                  "errors": {}, "error_messages": {}}
        assert lv["output_tokens"] == 8 * 8  # ignore_eos: exactly max_tokens each
        assert lv["ttft_ms"]["count"] == 8 and lv["itl_ms"]["count"] == 8 * 7
        assert lv["output_tokens_per_s"] > 0 and lv["tokens_estimated_requests"] == 0
    assert result["target"]["model"] == "loadgen-sim" and not result["partial"]


def test_latencies_are_never_shorter_than_the_server_takes(start_sim):
    # How close to the server's own timing the client gets is measured in benchmarks/
    # (timing error per request); here only what cannot flake: the server waits 80 ms for
    # the first token and 20 ms between tokens, and no request is seen faster than that.
    url = start_sim(SimProfile(ttft_s=0.08, itl_s=0.02, batch_slowdown=0.0))
    result = sweep(url, [loadgen.ConstantConcurrency(2)], loadgen.StopRule(requests=6),
                   prompts=loadgen.PromptSource(16, 10), keep_records=True)
    records = result.levels[0].records
    assert len(records) == 6 and all(r.ok and r.output_tokens == 10 for r in records)
    for rec in records:
        assert rec.first_content_ns - rec.intended_ns >= 80_000_000
        # The 10th token is due 9 ITLs after the first was due (the simulator's schedule is
        # absolute: a late first token makes the gap after it shorter, never the whole).
        assert rec.end_ns - rec.intended_ns >= 80_000_000 + 9 * 20_000_000


def test_warmup_requests_are_sent_but_not_measured(start_sim):
    url = start_sim()
    before = stats(url)["requests_received"]
    lv = sweep(url, [loadgen.ConstantConcurrency(1)],
               loadgen.StopRule(requests=5, warmup=3)).to_dict()["levels"][0]
    assert lv["requests"]["completed"] == 5 and lv["ttft_ms"]["count"] == 5
    assert stats(url)["requests_received"] - before == 8


class WrappedTarget:
    """A real target behind a wrapper: the engine sees only the wrapper's methods."""

    def __init__(self, inner):
        self.inner = inner

    async def open(self):
        await self.inner.open()

    async def close(self):
        await self.inner.close()

    def describe(self):
        return self.inner.describe()


def test_duration_stop_cancels_in_flight_after_grace_as_incomplete(start_sim):
    # Over the real HTTP stream: the cancel at the grace deadline reaches the transport.
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.05))  # 100 tokens take 5 s
    lv = sweep(url, [loadgen.ConstantConcurrency(3)],
               loadgen.StopRule(duration_s=0.3, graceful_stop_s=0.2),
               prompts=loadgen.PromptSource(16, 100)).to_dict()["levels"][0]
    assert lv["requests"]["incomplete"] == 3
    assert lv["requests"]["failed"] == 0 and lv["requests"]["completed"] == 0
    assert lv["output_tokens"] > 0  # tokens that arrived before the cancel still count


def test_run_control_stop_marks_partial(start_sim):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.05))
    control = RunControl()

    async def main():
        task = asyncio.ensure_future(loadgen.sweep(
            url, loads=[loadgen.ConstantConcurrency(2), loadgen.ConstantConcurrency(4)],
            stop=loadgen.StopRule(requests=50), prompts=loadgen.PromptSource(16, 50),
            control=control))
        await asyncio.sleep(0.5)
        control.stop()
        return await task

    result = asyncio.run(main())
    assert result.partial and len(result.levels) == 1
    assert result.levels[0].requests.incomplete == 2


def test_failures_are_counted_by_type_not_raised(start_sim):
    url = start_sim(SimProfile(ttft_s=0.005, itl_s=0.001, fault_500=0.3, fault_429=0.2,
                               fault_disconnect=0.2, seed=3))
    lv = sweep(url, [loadgen.ConstantConcurrency(4)], loadgen.StopRule(requests=40)).to_dict()["levels"][0]
    req = lv["requests"]
    assert req["completed"] + req["failed"] == 40
    assert req["errors"].get("http_500", 0) > 0 and req["errors"].get("http_429", 0) > 0
    assert set(req["errors"]) <= {"http_500", "http_429", "disconnected", "truncated_stream"}
    assert len(set(req["errors"])) >= 3  # mid-stream disconnects show up too
    # What the server said is kept: a few distinct messages per error type.
    assert set(req["error_messages"]) == set(req["errors"])
    for kind, messages in req["error_messages"].items():
        assert 1 <= len(messages) <= 3 and len(set(messages)) == len(messages), kind


def test_api_key_required_is_an_auth_error_and_never_written(start_sim, monkeypatch, tmp_path):
    url = start_sim(api_key="sk-test-secret-123")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(AuthError, match="OPENAI_API_KEY"):
        sweep(url, [loadgen.ConstantConcurrency(1)], loadgen.StopRule(requests=1))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-123")
    out = tmp_path / "r.json"
    result = sweep(url, [loadgen.ConstantConcurrency(1)], loadgen.StopRule(requests=2), out=out)
    assert result.levels[0].requests.completed == 2
    assert "sk-test-secret-123" not in out.read_text()


def test_non_streaming_mode_ttft_equals_e2e(sim_url):
    lv = sweep(sim_url, [loadgen.ConstantConcurrency(1)], loadgen.StopRule(requests=3),
               options=loadgen.RequestOptions(stream=False)).to_dict()["levels"][0]
    assert lv["requests"]["completed"] == 3 and lv["output_tokens"] == 24
    assert lv["ttft_ms"]["p50"] == lv["e2e_ms"]["p50"]


def test_completions_api_and_continuous_usage(sim_url):
    options = loadgen.RequestOptions(api="completions", continuous_usage=True)
    lv = sweep(sim_url, [loadgen.ConstantConcurrency(2)], loadgen.StopRule(requests=4),
               options=options).to_dict()["levels"][0]
    assert lv["requests"]["completed"] == 4 and lv["output_tokens"] == 32


def test_vllm_metrics_facts_and_per_level_samples_are_recorded(start_sim):
    url = start_sim(SimProfile(ttft_s=0.01, itl_s=0.01))
    result = sweep(url, [loadgen.ConstantConcurrency(3)], loadgen.StopRule(requests=6),
                   prompts=loadgen.PromptSource(16, 60),
                   server_metrics_interval_s=0.1).to_dict()
    assert result["server"]["source"] == "metrics" and result["server"]["kv_cache_tokens"] > 0
    sampled = result["levels"][0]["server_metrics"]
    assert sampled["scrapes"] >= 3
    assert sampled["summary"]["num_requests_running"]["max"] >= 1


class RecordingTarget(WrappedTarget):
    """Wraps the real HTTP target and logs the order of prepare/write/end per request id."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.events: list[tuple[str, int]] = []

    async def send(self, prompt, record):  # the engine must not need it here
        raise AssertionError("a preparing target is sent prepared requests")

    def prepare(self, prompt, record):
        self.events.append(("prepare", record.request_id))
        return self.inner.prepare(prompt, record)

    async def send_prepared(self, prepared, record, on_sent=None):
        def sent():
            self.events.append(("sent", record.request_id))
            if on_sent:
                on_sent()

        await self.inner.send_prepared(prepared, record, sent)
        self.events.append(("end", record.request_id))


def test_closed_loop_builds_the_next_request_before_the_current_one_ends(sim_url):
    target = RecordingTarget(loadgen.make_target(sim_url))
    result = sweep(target, [loadgen.ConstantConcurrency(1)], loadgen.StopRule(requests=4),
                   keep_records=True, server_metrics_interval_s=None)
    records = result.levels[0].records
    assert [r.ok for r in records] == [True] * 4 and result.levels[0].requests.completed == 4
    order = target.events
    for done, following in zip(records, records[1:]):
        # The following request was built after this one was written, before it ended.
        assert (order.index(("sent", done.request_id)) < order.index(("prepare", following.request_id))
                < order.index(("end", done.request_id)))
        # ...and it was due the moment this one ended (closed loop).
        assert following.intended_ns == done.end_ns <= following.sent_ns
    sent = [i for kind, i in order if kind == "sent"]
    assert sent == [r.request_id for r in records]  # exactly 4 sent; a leftover is never sent
