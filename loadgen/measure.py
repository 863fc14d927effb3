"""One level as a run measures it: the load, with the client's per-second timeline beside
it and the server's ``/metrics`` sampled alongside (both on the monotonic clock), in this
process or on worker processes (whose records stay there: no client timeline then)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Callable, Sequence

from .engine import LevelResult, RunControl, run_level
from .load import Load
from .runconfig import RunConfig
from .targets.base import Target
from .timeline import ClientTimeline, timeline_section

if TYPE_CHECKING:
    from .measurement import Exports
    from .workers import WorkerPool


def _sampler(url: str, interval_s: float):
    """vLLM's /metrics sampler (imported here: aiohttp loads only when a level samples,
    so ``import loadgen`` and ``loadgen --help`` stay light)."""
    from .vllm.server_metrics import ServerMetricsSampler

    return ServerMetricsSampler(url, interval_s)


async def measure_level(target: Target, load: Load, sample_url: str | None,
                        interval_s: float, watchers: Sequence = (), sinks: Sequence = (),
                        **kwargs) -> LevelResult:
    """One level, with the client's per-second timeline beside it and the server's
    /metrics sampled alongside when there is a URL (both on the monotonic clock)."""
    timeline = ClientTimeline()
    watchers, sinks = (timeline, *watchers), (timeline, *sinks)
    if sample_url is None:
        level = await run_level(target, load, watchers=watchers, sinks=sinks, **kwargs)
        level.timeline = timeline_section(timeline.snapshot(level.end_ns))
        return level
    sampler = _sampler(sample_url, interval_s)
    level = await run_level(target, load, watchers=(sampler, *watchers), sinks=sinks, **kwargs)
    await sampler.finish()
    level.server = sampler.snapshot()
    level.timeline = timeline_section(timeline.snapshot(level.end_ns),
                                      server_metrics=sampler.start_ns)
    return level


async def measure_on_workers(pool: WorkerPool, index: int, load: Load, config: RunConfig,
                             sample_url: str | None, control: RunControl,
                             on_progress: Callable[[dict], None] | None,
                             exports: Exports) -> LevelResult:
    """One level on every worker (their export rows and intervals written to
    ``exports``); the parent samples the server's /metrics meanwhile."""
    if sample_url is None:
        return await pool.level(index, load, config.stop, control, on_progress, exports)
    sampler = _sampler(sample_url, config.server_metrics_interval_s or 1.0)
    # Not a TaskGroup: a worker's one-line error (WorkerFailed) must reach the CLI as
    # itself, not wrapped in an ExceptionGroup.
    watcher = asyncio.ensure_future(sampler.run())
    try:
        level = await pool.level(index, load, config.stop, control, on_progress, exports)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    await sampler.finish()
    level.server = sampler.snapshot()
    return level
