"""``--ray``: the same worker engine as Ray actors, against one real local Ray cluster
(``ray_cluster`` in conftest: 2 CPUs, started once per session). Kept few and small."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from pathlib import Path

import pytest

import loadgen
from loadgen.engine import RunControl
from loadgen.errors import TargetError
from loadgen.load import ArrivalRate, ConstantConcurrency, StopRule
from loadgen.metrics import decode_histogram
from loadgen.runconfig import RunConfig, TargetConfig
from loadgen.workers import ray_actors
from loadgen.workload.prompts import PromptSource

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def _config(url: str, *loads, stop: StopRule, workers: int = 2) -> RunConfig:
    return RunConfig(loads=loads, stop=stop, target=TargetConfig(url), workers=workers,
                     prompts=PromptSource(8, 4), ray="local", server_metrics_interval_s=None)


def test_actors_count_exactly_keep_the_schedule_and_name_their_nodes(ray_cluster, sim_url):
    rate = ArrivalRate(50, "poisson", seed=3)
    config = _config(sim_url, ConstantConcurrency(3), rate, stop=StopRule(requests=11))
    result = asyncio.run(loadgen.api.run_config(config, keep_records=True))
    data = result.to_dict()
    assert data["partial"] is False and data["workers"]["kind"] == "ray"
    for entry in data["workers"]["workers"]:
        assert entry["node"] and entry["node_id"] and entry["clock_round_trip_ms"] > 0
        assert entry["clock_offset_ms"] == 0  # same node as the driver: same clock
    for level in data["levels"]:
        assert level["requests"]["completed"] == 11 and level["output_tokens"] == 44
        assert decode_histogram(level["histograms"]["e2e_ms"]).get_total_count() == 11
        assert [w["node"] for w in level["workers"]] == [os.uname().nodename] * 2
    closed, opened = data["levels"][0]["workers"], result.levels[1].measured
    assert [w["completed"] for w in closed] == [7, 4]  # 2 and 1 streams
    intended = sorted(r.intended_ns - opened.start_ns for r in opened.records)
    assert intended == list(itertools.islice(rate.offsets_ns(), 11))


def test_an_actor_that_cannot_be_placed_is_a_clear_error(ray_cluster, sim_url, monkeypatch):
    monkeypatch.setattr(ray_actors, "PLACEMENT_TIMEOUT_S", 1.0)
    config = _config(sim_url, ConstantConcurrency(3), stop=StopRule(requests=3), workers=3)
    with pytest.raises(TargetError, match="could not place 3 workers of 1 CPU each .* 2 CPUs"):
        asyncio.run(loadgen.api.run_config(config))
    _wait_for_free_cpus(ray_cluster)


def test_stop_and_a_killed_actor_keep_what_was_measured(ray_cluster, start_sim):
    url = start_sim(loadgen.simulator.SimProfile(ttft_s=0.01, itl_s=0.02))
    config = _config(url, ConstantConcurrency(4), ConstantConcurrency(2),
                     stop=StopRule(duration_s=30), workers=2)
    control, killed = RunControl(), []

    def progress(load, snapshot):
        if snapshot["elapsed_s"] > 2.5 and not killed:  # after a report with histograms
            killed.append(_actor_pids()[0])
            os.kill(killed[0], signal.SIGKILL)
        if killed and snapshot["elapsed_s"] > 4:
            control.stop()  # what Ctrl-C does

    messages: list[str] = []
    result = asyncio.run(loadgen.api.run_config(config, control=control, on_progress=progress,
                                                log=messages.append))
    data = result.to_dict()
    assert data["partial"] is True and len(data["levels"]) == 1  # no level after a death
    level = data["levels"][0]
    assert level["partial"] is True and level["requests"]["completed"] >= 4
    dead = [w for w in level["workers"] if w["status"] == "died"]
    assert len(dead) == 1 and dead[0]["completed"] > 0
    assert level["requests"]["completed"] == sum(w["completed"] for w in level["workers"])
    assert len(messages) == 1 and "Ray actor on" in messages[0] and "partial" in messages[0]
    _wait_for_free_cpus(ray_cluster)


def _actor_pids() -> list[int]:
    """Processes of live RayWorker actors on this host (Ray titles them ``ray::RayWorker``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::RayWorker"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return sorted(pids)


def _wait_for_free_cpus(ray, seconds: float = 20) -> None:
    """Every actor and placement group of a run is gone afterwards: both CPUs free again."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) == 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"CPUs still held: {ray.available_resources()}")
