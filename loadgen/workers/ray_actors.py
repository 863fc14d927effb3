"""Workers as Ray actors (``--ray ADDRESS``, extra ``loadgen[ray]``): many hosts.

A few async actors, one CPU each, placed by one placement group (``SPREAD`` over the
nodes), each running the same :class:`~loadgen.workers.worker.WorkerEngine` as a
worker process and driving many streams; never one actor per request. Only small
:class:`~loadgen.workers.payload.LevelReport` objects cross Ray (every half second and
at the end), never per-token data.

Clocks: ``perf_counter_ns`` is per host, so each actor's offset to the driver is
measured when it starts (the best of a few round trips: offset = actor clock − the
driver's midpoint) and recorded in the results. Each level's start instant, a couple
of seconds ahead in the driver's clock, reaches each actor in its own clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any, AsyncIterator, Callable

from ..engine import Share
from ..errors import ConfigError, TargetError, one_line
from ..runconfig import RunConfig
from .handle import WorkerDied, WorkerFailed
from ..load import Load, StopRule
from .payload import LevelReport
from .worker import HISTOGRAMS_EVERY_S, PROGRESS_EVERY_S, WorkerEngine

INSTALL_HINT = "--ray needs Ray: pip install 'loadgen[ray]'"
PLACEMENT_TIMEOUT_S = 60.0  # an actor that cannot be placed by then is an error
START_LEAD_S = 2.0  # levels start this far ahead: reaches every node in time
CLOCK_ROUND_TRIPS = 5


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return ray


def connect(address: str) -> bool:
    """Join (``auto``, ``ray://HOST:PORT``, ``HOST:PORT``) or start (``local``) a cluster;
    reuse the connection this process already has. True when this call connected."""
    ray = _import_ray()
    if ray.is_initialized():
        return False
    try:
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise TargetError(f"cannot join the Ray cluster at {address!r}: {one_line(exc)}") \
            from None
    return True


class RayWorker:
    """The actor: a :class:`WorkerEngine` behind Ray's async actor methods."""

    def __init__(self, config: RunConfig, share: Share, keep_records: bool) -> None:
        self.engine = WorkerEngine(config, share, keep_records)

    async def open(self) -> dict:
        import ray

        info = await self.engine.open()
        return {**info, "node": socket.gethostname(),
                "node_id": ray.get_runtime_context().get_node_id()}

    def clock(self) -> int:
        return time.perf_counter_ns()

    async def warm_up(self, level: int, start_ns: int | None, load: Load,
                      stop: StopRule) -> None:
        await self.engine.warm_up(level, start_ns, load, stop)

    async def measure(self, level: int, start_ns: int, load: Load,
                      stop: StopRule) -> LevelReport:
        return await self.engine.measure(level, start_ns, load, stop)

    def report(self, with_histograms: bool) -> LevelReport | None:
        return self.engine.report(with_histograms)

    def stop(self) -> None:
        self.engine.stop()

    async def close(self) -> None:
        await self.engine.close()


class RayWorkerHandle:
    """The driver's handle on one actor (see :class:`~loadgen.workers.handle.WorkerHandle`)."""

    kind = "ray"

    def __init__(self, actor: Any, index: int) -> None:
        self.actor = actor
        self.index = index
        self.info: dict[str, Any] = {"index": index}
        self.latest: LevelReport | None = None
        self.latest_full: LevelReport | None = None
        self.died: str | None = None
        self.clock_offset_ns = 0
        self.on_report: Callable[[LevelReport], None] | None = None

    async def start(self) -> dict:
        import ray

        self.info.update(await self._call(self.actor.open.remote()))
        offset_ns, rtt_ns = await self._clock_offset()
        self.info["clock_round_trip_ms"] = round(rtt_ns / 1e6, 3)
        # On the driver's own node the clock is the same CLOCK_MONOTONIC: the measured
        # offset would only be round-trip asymmetry.
        same_node = self.info.get("node_id") == ray.get_runtime_context().get_node_id()
        self.clock_offset_ns = 0 if same_node else offset_ns
        return self.info

    async def _clock_offset(self) -> tuple[int, int]:
        """Offset of the actor's clock to ours from the fastest of a few round trips."""
        best: tuple[int, int] | None = None
        for _ in range(CLOCK_ROUND_TRIPS):
            sent = time.perf_counter_ns()
            theirs = await self._call(self.actor.clock.remote())
            back = time.perf_counter_ns()
            if best is None or back - sent < best[1]:
                best = (theirs - (sent + back) // 2, back - sent)
        assert best is not None
        return best

    async def warm_up(self, level: int, start_ns: int | None, load: Load,
                      stop: StopRule) -> None:
        await self._call(self.actor.warm_up.remote(level, start_ns, load, stop))

    async def measure(self, level: int, start_ns: int, load: Load,
                      stop: StopRule) -> LevelReport:
        self.latest = self.latest_full = None
        done = asyncio.Event()
        poller = asyncio.ensure_future(self._poll(done))
        try:
            report = await self._call(self.actor.measure.remote(level, start_ns, load, stop))
        finally:
            # A report taken from the actor carries export rows it sends only once: let a
            # call under way finish rather than cancel it.
            done.set()
            await asyncio.gather(poller, return_exceptions=True)
        if self.on_report is not None:
            self.on_report(report)
        return report

    async def _poll(self, done: asyncio.Event) -> None:
        """Progress every half second; histograms every second (kept if the actor dies)."""
        next_full = time.monotonic() + HISTOGRAMS_EVERY_S
        while not done.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), PROGRESS_EVERY_S)
                return
            full = time.monotonic() >= next_full
            report = await self.actor.report.remote(full)
            if report is not None:
                if self.on_report is not None:
                    self.on_report(report)
                self.latest = report
                if full:
                    self.latest_full = report
                    next_full += HISTOGRAMS_EVERY_S

    def started_in_level(self) -> int:
        """Measured requests started in the running level, as of the last progress report
        (an actor on another host shares no memory with the driver)."""
        return self.latest.started if self.latest is not None else 0

    def stop(self) -> None:
        if not self.died:
            self.actor.stop.remote()

    async def close(self) -> None:
        ray = _import_ray()
        if not self.died:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._call(self.actor.close.remote()), 10)
        ray.kill(self.actor)

    async def _call(self, ref: Any) -> Any:
        """Await an actor call; Ray's failures become ours."""
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return await ref
        except RayActorError as exc:
            node = self.info.get("node") or "an unknown node"
            self.died = f"worker {self.index} (Ray actor on {node}) died: {one_line(exc, 160)}"
            raise WorkerDied(self.died) from None
        except RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            raise WorkerFailed(one_line(cause)) from None


@contextlib.asynccontextmanager
async def ray_workers(config: RunConfig, count: int,
                      keep_records: bool) -> AsyncIterator[tuple[list[RayWorkerHandle], dict]]:
    """``count`` actors placed on the cluster at ``config.ray``; removed afterwards."""
    ray = _import_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    connected = connect(config.ray or "auto")
    group = placement_group([{"CPU": 1}] * count, strategy="SPREAD")
    try:
        try:
            await asyncio.wait_for(group.ready(), PLACEMENT_TIMEOUT_S)
        except asyncio.TimeoutError:
            cpus = ray.cluster_resources().get("CPU", 0)
            raise TargetError(f"Ray could not place {count} workers of 1 CPU each within "
                              f"{PLACEMENT_TIMEOUT_S:g}s (the cluster has {cpus:g} CPUs); "
                              "lower --workers or add nodes") from None
        actor_class = ray.remote(num_cpus=1)(RayWorker)
        handles = [RayWorkerHandle(actor_class.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=i)).remote(config, Share(i, count),
                                                               keep_records), i)
            for i in range(count)]
        yield handles, {"lead_s": START_LEAD_S, "timeout_s": PLACEMENT_TIMEOUT_S}
    finally:
        remove_placement_group(group)
        if connected:
            ray.shutdown()
