"""``--workers auto`` (the default): a pure function of the machine's cores, this
process's CPU affinity and the load, with the reason the run's header prints."""

from __future__ import annotations

import asyncio

import pytest

import loadgen
from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule
from loadgen.runconfig import (
    STREAMS_PER_WORKER, RunConfig, WorkerChoice, choose_workers, default,
    usable_cores)
from loadgen.measurement import Measurement

C = ConstantConcurrency


def test_auto_is_the_default_everywhere_the_run_is_described():
    assert default(RunConfig, "workers") == "auto"
    assert RunConfig(loads=(C(1),), stop=StopRule(requests=1)).workers == "auto"


@pytest.mark.parametrize("cpu_count, affinity, usable", [
    (1, None, 1), (2, None, 2), (3, 3, 3),  # small machines: every core
    (4, None, 3), (64, None, 63),  # from 4 cores on, one is left for the system
    (64, 2, 2), (64, 8, 7), (8, 16, 7),  # the affinity mask bounds it (never above the count)
])
def test_usable_cores_follow_the_affinity_and_leave_one_from_four(cpu_count, affinity, usable):
    assert usable_cores(cpu_count, affinity) == usable


def test_one_process_up_to_its_budget_whatever_the_machine():
    for loads in ([C(1)], [C(64), C(STREAMS_PER_WORKER)], [ArrivalRate(50)]):
        choice = choose_workers(loads, cpu_count=64, affinity=None)
        assert choice.workers == 1 and "budget" in choice.reason


@pytest.mark.parametrize("loads, cpu_count, affinity, workers", [
    ([C(257)], 64, None, 2),
    ([C(1, ), C(1024)], 64, None, 4),  # the heaviest level decides
    ([C(4096)], 64, None, 16),
    ([C(4096)], 64, 8, 7),  # pinned to 8 cores: 7, one for the system
    ([C(1024)], 2, None, 2),  # this 2-core machine: both (fewer than 4: none kept back)
    ([C(1024)], 2, 1, 1),  # pinned to one core: one process
    ([ArrivalRate(450)], 32, None, 5),
    ([ArrivalRate(100_000, max_in_flight=4)], 32, None, 1),  # the cap bounds the streams
    ([ArrivalRate(100, max_in_flight=600)], 32, None, 3),
])
def test_one_worker_per_budget_capped_by_the_usable_cores(loads, cpu_count, affinity, workers):
    choice = choose_workers(loads, cpu_count, affinity)
    assert choice == WorkerChoice(workers, "auto", choice.reason)
    assert choice.reason.startswith("one process" if workers == 1 else f"{workers} workers")


def test_the_reason_says_when_the_cores_cap_the_choice():
    capped = choose_workers([C(4096)], cpu_count=8, affinity=4)
    assert capped.workers == 3 and "of 16 wanted" in capped.reason
    assert "3 usable cores of 8" in capped.reason
    pinned = choose_workers([C(1024)], cpu_count=2, affinity=1)
    assert "would take 4" in pinned.reason and "1 usable core of 2" in pinned.reason


def test_workers_1_forces_one_process_and_n_is_taken_as_asked():
    one = RunConfig(loads=(C(4096),), stop=StopRule(requests=1), workers=1)
    assert one.worker_choice() == WorkerChoice(1, 1, "one process, as asked")
    assert RunConfig(loads=(C(1),), stop=StopRule(requests=1), workers=3).worker_count() == 3


def test_auto_keeps_one_process_for_what_cannot_be_split():
    heavy = dict(loads=(C(4096),), stop=StopRule(requests=1))
    profiled = RunConfig(**heavy, measurement=Measurement(profile="saturation"))
    assert profiled.worker_choice().workers == 1
    assert "--profile saturation run in one process" in profiled.worker_choice().reason
    assert RunConfig(**heavy).worker_choice(in_process_target=True).workers == 1


def test_the_results_record_the_choice_and_the_header_prints_it(sim_url):
    from loadgen.progress import run_header

    seen = []
    results = asyncio.run(loadgen.sweep(
        sim_url, loads=[C(2)], stop=StopRule(requests=2), prompts=loadgen.PromptSource(4, 2),
        server_metrics_interval_s=None, on_start=lambda r: seen.append(run_header(r))))
    choice = results.data["worker_choice"]
    assert choice["workers"] == 1 and choice["requested"] == "auto"
    assert f"workers: 1 ({choice['reason']})" in seen[0]


def test_a_scenario_sweep_takes_auto_by_default_and_a_count_or_auto():
    from tests.test_scenario_schema import VALID, check, messages

    assert check(VALID).scenario.measurements.sweep.workers == "auto"
    given = VALID.replace("requests: 4}", "requests: 4, workers: 3}")
    assert check(given).scenario.measurements.sweep.workers == 3
    bad = VALID.replace("requests: 4}", "requests: 4, workers: many}")
    assert any("workers must be a whole number >= 1 or auto" in m for m in messages(bad))
