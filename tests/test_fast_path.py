"""The closed loop's fast path: the next request sent as the previous response ends.

Accounting in virtual time (:mod:`tests.helpers.chaining_target` plays the transport):
due at the previous end, sent then, counted once, never past the limit or a stop. Then
the real streaming pool against the simulator and the SageMaker test server.
"""

from __future__ import annotations

import asyncio

import pytest

import loadgen
from loadgen.engine import RunControl, run_level
from loadgen.load import ConstantConcurrency, StopRule
from tests.helpers.chaining_target import ChainingTarget
from tests.helpers.scripted_target import Reply
from tests.helpers.virtual_time import MS, LoopClock, run_virtual

PROMPTS = loadgen.PromptSource(8, 4)


def run(load, stop, reply=Reply(20), wake_ms=0, control=None, stop_at_ms=None):
    clock = LoopClock()
    target = ChainingTarget(clock, reply, wake_ms=wake_ms)

    async def main():
        if stop_at_ms is not None:
            asyncio.get_running_loop().call_later(stop_at_ms / 1e3, control.stop)
        return await run_level(target, load, stop, PROMPTS, control=control,
                               keep_records=True, clock=clock)

    return run_virtual(main()), target


def test_the_next_request_is_due_and_sent_at_the_previous_end_though_the_task_wakes_late():
    result, target = run(ConstantConcurrency(1), StopRule(requests=4), wake_ms=5)
    records = sorted(result.records, key=lambda r: r.intended_ns)
    assert [r.request_id for r in records] == target.sent and len(records) == 4
    assert target.chained == target.sent[1:]  # every request after the first: fast path
    for done, following in zip(records, records[1:]):
        assert following.intended_ns == done.end_ns == following.start_ns == following.sent_ns
    assert result.metrics.summary_of("send_lag_ms")["max"] == 0
    assert [(r.intended_ns - records[0].intended_ns) // MS for r in records] == [0, 20, 40, 60]


def test_the_fast_path_never_sends_past_the_request_limit():
    result, target = run(ConstantConcurrency(3), StopRule(requests=7), wake_ms=1)
    assert len(target.sent) == 7 and result.metrics.counts.completed == 7
    assert sorted(r.request_id for r in result.records) == sorted(target.sent)
    assert target.chained  # and some of them went by the fast path


def test_the_fast_path_sends_nothing_due_at_or_after_the_deadline():
    result, target = run(ConstantConcurrency(2), StopRule(duration_s=0.1))
    due = sorted((r.intended_ns - result.start_ns) // MS for r in result.records)
    assert due == [0, 0, 20, 20, 40, 40, 60, 60, 80, 80]
    assert len(target.sent) == 10


def test_a_request_sent_by_the_fast_path_before_a_stop_is_tallied_once_as_incomplete():
    # Reply 20 ms, the task wakes 5 ms after each end: Ctrl-C at 22 ms falls between the
    # fast path's send of request 2 and the task taking it over.
    control = RunControl()
    result, target = run(ConstantConcurrency(1), StopRule(requests=10), wake_ms=5,
                         control=control, stop_at_ms=22)
    assert len(target.sent) == 2 and target.chained == target.sent[1:]
    by_id = {r.request_id: r for r in result.records}
    assert sorted(by_id) == sorted(target.sent) and len(result.records) == 2
    assert by_id[target.chained[0]].incomplete


@pytest.mark.integration
def test_the_streaming_pool_sends_the_next_request_from_the_read(sim_url):
    result = asyncio.run(loadgen.sweep(sim_url, loads=[ConstantConcurrency(2)],
                                       stop=StopRule(requests=10), keep_records=True,
                                       prompts=PROMPTS, server_metrics_interval_s=None))
    level = result.levels[0]
    assert level.requests.completed == 10 and level.requests.failed == 0
    assert level.data["connections"]["sent_on_completion"] >= 1
    ends = {r.end_ns for r in level.records}
    # Closed loop: every request is due at the level start or at an earlier request's end.
    first = min(r.intended_ns for r in level.records)
    assert all(r.intended_ns in ends or r.intended_ns == first for r in level.records)


@pytest.mark.integration
def test_the_sagemaker_target_sends_its_signed_next_request_from_the_read(monkeypatch, tmp_path):
    from loadgen.simulator.sagemaker_server import (
        ACCESS_KEY, REGION, SECRET_KEY, SageMakerTestServer, ServerConfig)
    from tests.helpers.aws_env import isolate_aws

    isolate_aws(monkeypatch, tmp_path, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                region=REGION)
    with SageMakerTestServer(ServerConfig(seed=7)) as server:  # checks every signature
        result = asyncio.run(loadgen.sweep(
            "sagemaker://openai", endpoint_url=server.url, loads=[ConstantConcurrency(2)],
            stop=StopRule(requests=8), prompts=PROMPTS, server_metrics_interval_s=None))
    level = result.levels[0]
    assert level.requests.completed == 8 and level.requests.failed == 0
    assert level.data["connections"]["sent_on_completion"] >= 1
