"""Worker shares of a level, exactly: each worker's share run alone in virtual time.

A level split over N workers must be the one-process level: the same requests due at the
same instants, the same ones excluded by a ramp-up, the same SLO counts. Here every
worker's share (:func:`loadgen.workers.split.worker_level` + its
:class:`~loadgen.engine.Share`) runs through the engine on
:mod:`tests.helpers.virtual_time` against a :class:`ScriptedTarget`, as a worker
process runs it, and the union is compared with the one-process run to the nanosecond.
The real processes against the simulator are in test_workers.py.
"""

from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import loadgen
from loadgen import engine
from loadgen.engine import LevelResult, LevelRun, Share
from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule, ramped
from loadgen.slo import SLOCounts, parse_slo
from loadgen.workers.payload import LevelReport, merge_level
from loadgen.workers.split import ramp_arrivals, worker_level
from tests.helpers.scripted_target import Reply, ScriptedTarget
from tests.helpers.virtual_time import MS, LoopClock, run_virtual

PROMPTS = loadgen.PromptSource(8, 4, salt="s-")


START_NS = 10**9  # every share starts at virtual 1 s (run_virtual's start), as workers at t0


def run_share(load, stop, share: Share, script=Reply(), slos=(),
              prompts=PROMPTS) -> tuple[LevelResult, list[int]]:
    """Worker ``share``'s part of the level, from :data:`START_NS`: its result (records
    kept) and the ids it sent."""
    part = worker_level(load, stop, share)
    assert part is not None
    clock = LoopClock()
    target = ScriptedTarget(clock, script)
    how = LevelRun(share=share, keep_records=True, slos=tuple(slos), clock=clock)

    async def main() -> LevelResult:
        return await engine.measure(target, *part, prompts, how, start_ns=START_NS, whole=load)

    return run_virtual(main()), target.sent


def run_level_on(workers: int, load, stop, script=Reply(), slos=(), prompts=PROMPTS):
    """The level on ``workers`` shares: (results, every sent id, every measured due ms)."""
    results, sent = [], []
    for i in range(workers):
        result, ids = run_share(load, stop, Share(i, workers), script, slos, prompts)
        results.append(result)
        sent += ids
    due = sorted((r.intended_ns - START_NS) / MS for result in results for r in result.records)
    return results, sorted(sent), due


@pytest.mark.parametrize("workers", [2, 3])
def test_closed_loop_ramp_over_workers_starts_every_stream_at_its_global_place(workers):
    # One process (test_scheduling.py): stream g starts at 100·g ms, so 4 + 3 + 2 + 1
    # requests are due in the 400 ms ramp; then every stream at 400 and 500 ms.
    load, stop = ConstantConcurrency(4), StopRule(requests=8, ramp_up_s=0.4)
    one, sent_one, due_one = run_level_on(1, load, stop, Reply(100))
    many, sent_many, due_many = run_level_on(workers, load, stop, Reply(100))
    assert one[0].ramp_excluded == sum(r.ramp_excluded for r in many) == 10
    assert len(sent_one) == len(sent_many) == 18
    assert due_one == due_many == [400] * 4 + [500] * 4
    assert sum(r.metrics.counts.completed for r in many) == 8


def test_open_loop_ramp_over_workers_is_the_one_process_ramped_schedule():
    load, stop = ArrivalRate(10), StopRule(requests=4, ramp_up_s=1.0)
    schedule = list(itertools.islice(ramped(load.offsets_ns(), 10**9), 9))
    one, sent_one, due_one = run_level_on(1, load, stop, Reply(5))
    two, sent_two, due_two = run_level_on(2, load, stop, Reply(5))
    # 5 arrivals in the ramp (0, 2, 4 for worker 0; 1, 3 for worker 1), then 4 measured.
    assert [r.ramp_excluded for r in two] == [3, 2]
    assert sent_one == sent_two == list(range(1, 10))  # arrival k is request k + 1
    assert due_one == due_two == [o / MS for o in schedule[5:]]


@given(rate=st.floats(1, 200), ramp=st.floats(0, 3), requests=st.integers(1, 300),
       count=st.integers(1, 6), seed=st.integers(0, 50))
def test_open_loop_ramped_shares_are_the_arrivals_after_the_ramp(rate, ramp, requests, count,
                                                                seed):
    load = ArrivalRate(rate, "poisson", seed=seed)
    before = ramp_arrivals(load, ramp)
    parts = [worker_level(load, StopRule(requests, ramp_up_s=ramp), Share(i, count))
             for i in range(count)]
    assert sum(p[1].requests for p in parts if p) == requests
    for i, part in enumerate(parts):  # worker i: its arrivals k < before + requests
        if part is not None:
            assert part[1].requests == len(range(i, before + requests, count)) - len(
                range(i, before, count))


def test_slo_counts_over_workers_sum_to_the_one_process_counts():
    # Requests with an even id take 300 ms to the first token, the others 50 ms: with
    # ttft_ms<=100, exactly the odd ids are good, wherever they are sent from. (Open loop:
    # arrival k is request k + 1 in every split, so both runs send ids 1..9.)
    slos = (parse_slo("ttft_ms<=100"), parse_slo("e2e_ms<=1000"), parse_slo("ttft_ms:p90<=100"))

    def script(prompt, rec):
        return Reply(300 if rec.request_id % 2 == 0 else 50, tokens=3, itl_ms=10)

    load, stop = ArrivalRate(20), StopRule(requests=9)
    one, _, _ = run_level_on(1, load, stop, script, slos)
    two, _, _ = run_level_on(2, load, stop, script, slos)
    sent = sum(r.metrics.counts.requests for r in one)
    single = one[0].slo.to_dict(1.0, one[0].metrics.hists, sent)
    reports = [LevelReport.of(i, r.metrics, with_histograms=True, start_ns=r.start_ns,
                              end_ns=r.end_ns, slo=r.slo, final=True)
               for i, r in enumerate(two)]
    merged = merge_level(load, reports, 0, False, stop, slos)
    assert merged.metrics.counts.requests == sent == 9
    split = merged.slo.to_dict(1.0, merged.metrics.hists, sent)
    odd = len([i for i in range(1, 10) if i % 2])
    assert single == split
    assert split["good_requests"] == odd and split["good_output_tokens"] == 3 * odd
    assert [s["passed"] for s in split["per_slo"]] == [odd, 9, odd]
    assert split["per_slo"][2]["met"] is False  # 4 of 9 took 300 ms: the p90 misses


def test_slo_merge_without_slos_is_none_and_counts_add():
    assert merge_level(ConstantConcurrency(1), [], 0, False, StopRule(1)).slo is None
    slos = (parse_slo("ttft_ms<=100"),)
    a, b = SLOCounts(slos), SLOCounts(slos)
    a.evaluated, a.good, b.evaluated, b.passed = 2, 1, 3, [3]
    reports = [LevelReport(0, {}, {}, {}, None, slo=a), LevelReport(1, {}, {}, {}, None, slo=b)]
    merged = merge_level(ConstantConcurrency(1), reports, 0, False, StopRule(1), slos).slo
    assert (merged.evaluated, merged.good, merged.passed) == (5, 1, [3])


@pytest.mark.parametrize("load, stop", [
    (ConstantConcurrency(2), StopRule(requests=12)),  # 2 streams, 2 whole sessions each
    (ArrivalRate(4), StopRule(duration_s=1.0)),  # sessions start at 0, 250, 500, 750 ms
])
def test_sessions_over_workers_are_the_one_process_sessions(load, stop):
    # 3-turn sessions; every answer takes 100 ms. Sessions are numbered run-wide like
    # prompts (worker i's k-th session is session i + k·N), their turns take request ids.
    prompts = loadgen.PromptSource(8, 4, salt="s-", turns=3)
    one, sent_one, _ = run_level_on(1, load, stop, Reply(100), prompts=prompts)
    two, sent_two, _ = run_level_on(2, load, stop, Reply(100), prompts=prompts)

    def sessions(results) -> list[tuple[int, int]]:
        return sorted((r.session, r.turn) for result in results for r in result.records)

    assert sessions(one) == sessions(two) == [(s, t) for s in range(4) for t in (1, 2, 3)]
    assert len(sent_one) == len(sent_two) == 12 and len(set(sent_two)) == 12
    turns = merge_level(load, [LevelReport.of(i, r.metrics, with_histograms=True, turns={
        t: LevelReport.of(i, m, with_histograms=True) for t, m in r.turns.items()})
        for i, r in enumerate(two)], START_NS, False, stop).turns
    assert {t: m.counts.completed for t, m in turns.items()} == {
        t: m.counts.completed for t, m in one[0].turns.items()} == {1: 4, 2: 4, 3: 4}


def test_a_session_by_index_is_the_same_in_every_process():
    source = loadgen.PromptSource(8, 4, salt="s-", turns=3, output_stdev=2, seed=3)
    session = source.prompt(5)
    assert session.index == 5 and len(session.turns) == 3
    copy = pickle.loads(pickle.dumps(source)).prompt(5)  # a worker's unpickled config
    assert (copy.index, copy.turns) == (session.index, session.turns)
    assert len({turn.text for i in range(4) for turn in source.prompt(i).turns}) == 12
