"""The engine's scheduling, exactly: virtual time and a target that answers at scripted times.

Every test runs a level on :mod:`tests.helpers.virtual_time` against
:class:`~tests.helpers.scripted_target.ScriptedTarget`, so the instants below are exact
(nanoseconds): which requests were sent, when each was due, when it started, which were
dropped, cut off or excluded. The end-to-end tests against the real simulator are in
test_engine.py, test_ramp_up.py and test_sessions.py.
"""

from __future__ import annotations

import asyncio
import itertools
import math

import loadgen
from loadgen.engine import LevelResult, RunControl, run_level
from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule, ramped
from loadgen.metrics import request_latencies
from loadgen.workload.prompts import PromptStream
from tests.helpers.scripted_target import Reply, ScriptedTarget
from tests.helpers.virtual_time import MS, LoopClock, run_virtual

PROMPTS = loadgen.PromptSource(8, 4)


def run(load, stop, script=Reply(), prompts=PROMPTS, control=None, stop_at_ms=None,
        **target_options) -> tuple[LevelResult, ScriptedTarget]:
    """One level in virtual time; ``stop_at_ms``: ``control.stop()`` then (Ctrl-C)."""
    clock = LoopClock()
    target = ScriptedTarget(clock, script, **target_options)

    async def main() -> LevelResult:
        if stop_at_ms is not None:
            asyncio.get_running_loop().call_later(stop_at_ms / 1e3, control.stop)
        return await run_level(target, load, stop, prompts, control=control, keep_records=True,
                               clock=clock)

    return run_virtual(main()), target


def ms(values) -> list[float]:
    return [v / MS for v in values]


def due_ms(result: LevelResult) -> list[float]:
    """When each measured request was due, in ms from the level's start (ramp-up included)."""
    t0 = result.start_ns - round(result.ramp_up_s * 1e9)
    return sorted(ms(r.intended_ns - t0 for r in result.records))


def latencies_ms(result: LevelResult, metric: str) -> list[float]:
    ordered = sorted(result.records, key=lambda r: r.intended_ns)
    return [request_latencies(r)[metric] / 1e3 for r in ordered]


# -- closed loop ----------------------------------------------------------------------------

def test_closed_loop_streams_send_back_to_back_from_the_level_start():
    result, target = run(ConstantConcurrency(2), StopRule(requests=6), Reply(40, 3, 30))
    assert result.metrics.counts.completed == 6 and len(target.sent) == 6
    # Each stream's next request is due the instant its previous response ended.
    assert due_ms(result) == [0, 0, 100, 100, 200, 200]
    assert all(r.start_ns == r.intended_ns for r in result.records)
    assert result.metrics.summary_of("schedule_lag_ms")["count"] == 0
    assert latencies_ms(result, "ttft_ms") == [40.0] * 6
    assert latencies_ms(result, "e2e_ms") == [100.0] * 6
    assert latencies_ms(result, "tpot_ms") == [30.0] * 6
    assert result.metrics.summary_of("itl_ms")["count"] == 12
    assert result.metrics.summary_of("itl_ms")["mean"] == 30.0
    assert result.duration_s == 0.3


def test_closed_loop_client_delay_counts_in_latency_and_send_lag():
    # The client stalls 5 ms between starting a request and writing it: the latencies
    # include it and send lag shows it, and the next request is still due at the end.
    result, _ = run(ConstantConcurrency(1), StopRule(requests=3), Reply(20), late_ms=5)
    assert due_ms(result) == [0, 25, 50]
    assert [(r.sent_ns - r.intended_ns) / MS for r in result.records] == [5, 5, 5]
    assert latencies_ms(result, "ttft_ms") == [25.0] * 3
    assert result.metrics.summary_of("send_lag_ms")["mean"] == 5.0


def test_closed_loop_duration_starts_nothing_at_or_after_the_deadline():
    result, target = run(ConstantConcurrency(2), StopRule(duration_s=0.35), Reply(100))
    # Each stream sends at 0, 100, 200, 300 ms; the requests ending at 400 ms finish within
    # the graceful stop and nothing starts after the 350 ms deadline.
    assert due_ms(result) == [0, 0, 100, 100, 200, 200, 300, 300] and len(target.sent) == 8
    assert result.metrics.counts.completed == 8 and result.duration_s == 0.4


def test_graceful_stop_cancels_requests_in_flight_at_its_deadline():
    # Tokens at 50, 150, ..., 950 ms; the stop at 300 ms gives them until 500 ms.
    slow = Reply(ttft_ms=50, tokens=10, itl_ms=100)
    result, target = run(ConstantConcurrency(3), StopRule(duration_s=0.3, graceful_stop_s=0.2),
                         slow)
    counts = result.metrics.counts
    assert (counts.completed, counts.failed, counts.incomplete) == (0, 0, 3)
    assert len(target.sent) == 3
    assert [len(r.content_ns) for r in result.records] == [5, 5, 5]
    assert counts.output_tokens == 15  # tokens that arrived before the cancel still count
    assert {r.end_ns - result.start_ns for r in result.records} == {500 * MS}
    assert result.duration_s == 0.5 and not result.partial


def test_requests_that_finish_within_the_graceful_stop_complete():
    slow = Reply(ttft_ms=50, tokens=10, itl_ms=100)
    result, target = run(ConstantConcurrency(3), StopRule(duration_s=0.3, graceful_stop_s=2),
                         slow)
    assert result.metrics.counts.completed == 3 and len(target.sent) == 3
    assert result.duration_s == 0.95


def test_run_control_stop_cancels_in_flight_requests_without_grace():
    control = RunControl()
    result, target = run(ConstantConcurrency(2), StopRule(requests=50, graceful_stop_s=30),
                         Reply(ttft_ms=100, tokens=5, itl_ms=100), control=control,
                         stop_at_ms=250)
    counts = result.metrics.counts
    # Two rounds of 500 ms requests: the first round's two are cut off at 250 ms.
    assert (counts.completed, counts.incomplete) == (0, 2) and len(target.sent) == 2
    assert counts.output_tokens == 4  # at 100 and 200 ms, each
    assert result.partial and result.duration_s == 0.25


# -- open loop ------------------------------------------------------------------------------

def test_open_loop_sends_on_the_absolute_schedule_whatever_the_responses_take():
    result, _ = run(ArrivalRate(10), StopRule(requests=5), Reply(250))
    assert due_ms(result) == [0, 100, 200, 300, 400]
    assert all(r.start_ns == r.intended_ns for r in result.records)
    assert result.duration_s == 0.65  # the last, due at 400 ms, ends 250 ms later


def test_open_loop_poisson_sends_on_the_seeded_schedule():
    load = ArrivalRate(20, "poisson", seed=7)
    result, _ = run(load, StopRule(requests=8), Reply(5))
    expected = list(itertools.islice(ArrivalRate(20, "poisson", seed=7).offsets_ns(), 8))
    assert due_ms(result) == ms(expected)
    assert len(set(expected)) == 8  # not a constant grid in disguise


def test_open_loop_latency_is_measured_from_the_intended_send_time():
    # One server slot, 60 ms per request, requests due every 20 ms: each waits behind
    # the ones before it, and its latency says so (no coordinated omission).
    result, _ = run(ArrivalRate(50), StopRule(requests=8), Reply(60), slots=1)
    assert due_ms(result) == [20 * k for k in range(8)]
    assert latencies_ms(result, "e2e_ms") == [60 + 40 * k for k in range(8)]


def test_open_loop_client_delay_counts_in_latency_and_schedule_lag():
    result, _ = run(ArrivalRate(20), StopRule(requests=3), Reply(10), late_ms=100)
    assert due_ms(result) == [0, 50, 100]
    assert latencies_ms(result, "ttft_ms") == [110.0] * 3  # includes the 100 ms stall
    assert result.metrics.summary_of("schedule_lag_ms")["mean"] == 100.0


def test_open_loop_in_flight_cap_drops_arrivals_that_find_it_full():
    # Due every 10 ms, 25 ms each, at most 2 in flight: the arrival at 20 ms finds those of
    # 0 and 10 ms in flight and is dropped; at 30 ms the first has ended; and so on.
    result, target = run(ArrivalRate(100, max_in_flight=2), StopRule(requests=10), Reply(25))
    counts = result.metrics.counts
    assert (counts.completed, counts.dropped) == (7, 3)
    assert due_ms(result) == [0, 10, 30, 40, 60, 70, 90] and len(target.sent) == 7


def test_open_loop_sends_nothing_due_at_or_after_the_stop_deadline():
    result, target = run(ArrivalRate(10), StopRule(duration_s=0.3), Reply(50))
    assert due_ms(result) == [0, 100, 200] and len(target.sent) == 3
    assert result.duration_s == 0.25


def test_poisson_offsets_are_seeded_and_absolute():
    a = ArrivalRate(10, "poisson", seed=7).offsets_ns()
    b = ArrivalRate(10, "poisson", seed=7).offsets_ns()
    first = [next(a) for _ in range(2000)]
    assert first[:50] == [next(b) for _ in range(50)]
    assert 180 <= first[-1] / 1e9 <= 220  # ~2000 arrivals at 10/s take ~200 s
    constant = ArrivalRate(4).offsets_ns()
    assert [next(constant) for _ in range(3)] == [0, 250_000_000, 500_000_000]


# -- ramp-up --------------------------------------------------------------------------------

def test_closed_loop_ramp_starts_streams_spread_and_excludes_their_first_requests():
    result, target = run(ConstantConcurrency(4), StopRule(requests=8, ramp_up_s=0.4),
                         Reply(100))
    # Stream i starts at 100·i ms; everything due before 400 ms is sent, not measured:
    # 4 + 3 + 2 + 1 requests. Then 8 measured: every stream at 400 and at 500 ms.
    assert result.ramp_excluded == 10 and len(target.sent) == 18
    assert due_ms(result) == [400] * 4 + [500] * 4
    assert result.metrics.counts.completed == 8
    assert result.duration_s == 0.2  # from the ramp's end to the last end (600 ms)


def test_open_loop_ramp_follows_the_ramped_schedule_and_excludes_it():
    result, target = run(ArrivalRate(10), StopRule(requests=4, ramp_up_s=1.0), Reply(5))
    schedule = list(itertools.islice(ramped(ArrivalRate(10).offsets_ns(), 10**9), 9))
    # 10/s ramping over 1 s: 5 arrivals in the ramp (10 · 1 / 2), then the steady 100 ms.
    assert result.ramp_excluded == 5 and len(target.sent) == 9
    assert sorted(target.sent) == list(range(1, 10))
    assert due_ms(result) == ms(schedule[5:]) == [1000, 1100, 1200, 1300]


def test_ramped_offsets_follow_a_linear_rate():
    steady = ArrivalRate(10.0).offsets_ns()  # every 100 ms
    offsets = list(itertools.islice(ramped(steady, 2_000_000_000), 20))
    # During the 2 s ramp the rate rises 0 -> 10/s: 10 arrivals (10 * 2 / 2) in the ramp.
    assert offsets[:3] == [0, round(math.sqrt(2 * 2e9 * 1e8)), round(math.sqrt(2 * 2e9 * 2e8))]
    assert sum(o < 2_000_000_000 for o in offsets) == 10
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert gaps[:9] == sorted(gaps[:9], reverse=True)  # ever denser during the ramp
    assert all(g == 100_000_000 for g in gaps[10:])  # then the steady 10/s
    assert list(itertools.islice(ramped(ArrivalRate(10.0).offsets_ns(), 0), 3)) == [
        0, 100_000_000, 200_000_000]


# -- multi-turn sessions --------------------------------------------------------------------

def sessions(think_s: float) -> PromptStream:
    return PromptStream(loadgen.PromptSource(8, 4, turns=3, think_s=think_s, salt="s-"))


def test_session_turns_are_due_when_the_answer_ended_plus_the_think_time():
    result, _ = run(ConstantConcurrency(1), StopRule(requests=6), Reply(100),
                    prompts=sessions(0.05))
    turns = sorted(result.records, key=lambda r: r.intended_ns)
    assert [(r.session, r.turn) for r in turns] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2),
                                                    (1, 3)]
    # Turn 2 is due 50 ms after turn 1's answer ended; the next session's first turn the
    # moment the previous session's last answer ended (closed loop).
    assert due_ms(result) == [0, 150, 300, 400, 550, 700]
    assert all(r.start_ns == r.intended_ns for r in turns)
    assert [t.counts.completed for t in result.turns.values()] == [2, 2, 2]


def test_a_failed_turn_ends_its_session():
    def script(prompt, record):
        return Reply(10, error="http_500") if prompt.turn == 2 else Reply(10)

    result, target = run(ConstantConcurrency(1), StopRule(requests=4), script,
                         prompts=sessions(0))
    turns = sorted(result.records, key=lambda r: r.intended_ns)
    assert [(r.session, r.turn, r.error_type) for r in turns] == [
        (0, 1, None), (0, 2, "http_500"), (1, 1, None), (1, 2, "http_500")]
    assert len(target.sent) == 4
