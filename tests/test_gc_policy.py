"""Garbage collection off the measurement (loadgen.gcpolicy): on while a level is
measured, the collector's policy exactly as it was afterwards, and an opt-out."""

from __future__ import annotations

import gc

import pytest

import loadgen
from loadgen.engine import run_level
from loadgen.gcpolicy import quiet_gc, thresholds_for
from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule
from tests.helpers.scripted_target import Reply, ScriptedTarget
from tests.helpers.virtual_time import LoopClock, run_virtual


class PolicyWatcher:
    """Notes the collector's thresholds and frozen-object count while the level runs."""

    def __init__(self) -> None:
        self.seen: set[tuple] = set()

    async def run(self) -> None:
        import asyncio

        while True:
            self.seen.add((gc.get_threshold(), gc.get_freeze_count() > 0))
            await asyncio.sleep(0.005)


def measure_level(**kwargs) -> PolicyWatcher:
    clock, watcher = LoopClock(), PolicyWatcher()
    target = ScriptedTarget(clock, Reply(10, 3, 5))
    run_virtual(run_level(target, ConstantConcurrency(64), StopRule(requests=128),
                          loadgen.PromptSource(8, 4), watchers=(watcher,), clock=clock,
                          **kwargs))
    return watcher


@pytest.fixture
def default_policy():
    gc.unfreeze()
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_a_level_runs_with_setup_frozen_and_raised_thresholds_then_all_is_restored(
        default_policy):
    watcher = measure_level()
    assert watcher.seen == {(thresholds_for(ConstantConcurrency(64)), True)}
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_quiet_gc_false_leaves_the_collector_alone(default_policy):
    watcher = measure_level(quiet_gc=False)
    assert watcher.seen == {((700, 10, 10), False)}


def test_the_policy_is_restored_when_the_level_fails(default_policy):
    gc.set_threshold(1234, 5, 6)
    with pytest.raises(RuntimeError):
        with quiet_gc(ConstantConcurrency(8)):
            assert gc.get_threshold() != (1234, 5, 6) and gc.get_freeze_count() > 0
            raise RuntimeError("level failed")
    assert gc.get_threshold() == (1234, 5, 6) and gc.get_freeze_count() == 0


def test_objects_frozen_by_someone_else_stay_frozen(default_policy):
    gc.freeze()
    try:
        with quiet_gc(ConstantConcurrency(8)):
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_thresholds_grow_with_the_level_and_stay_bounded():
    small, big = thresholds_for(ConstantConcurrency(1)), thresholds_for(ConstantConcurrency(256))
    assert small[0] == 700 and big[0] == 25_600
    assert thresholds_for(ConstantConcurrency(10_000))[0] == 50_000
    assert thresholds_for(ArrivalRate(20.0))[0] == 2_000
