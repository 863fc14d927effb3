"""The programmatic async API. The CLI is a thin layer over these functions.

    import asyncio, loadgen
    result = asyncio.run(loadgen.sweep("http://127.0.0.1:8000",
                                       loads=[loadgen.ConstantConcurrency(c) for c in (1, 4, 16)],
                                       stop=loadgen.StopRule(requests=50)))
    print(result.levels[0].output_tokens_per_s, result.levels[0].ttft_ms.p99)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
from typing import AsyncIterator, Callable, Iterable, Sequence

from .config import RequestOptions
from .engine import LevelResult, RequestIds, RunControl, run_level
from .atomic import check_writable
from .errors import ConfigError, LoadgenError, RunStopped
from .load import ArrivalRate, ConstantConcurrency, Load, StopRule
from .prompts import PromptSource, PromptStream, prefill_count
from .record import Prompt
from .results import RunResult, now_iso
from .results_types import Results
from .targets.base import Target
from .workload import WorkloadSettings

# ``target=SIMULATOR``: the built-in vLLM simulator, started in a child process for the run.
SIMULATOR = "simulator"


def pool_size_for(loads: Sequence[Load]) -> int:
    """Connections needed: the highest concurrency, or the in-flight cap (0 = unlimited)."""
    sizes = []
    for load in loads:
        if isinstance(load, ConstantConcurrency):
            sizes.append(load.concurrency)
        else:
            sizes.append(load.max_in_flight or 0)
    return 0 if 0 in sizes else max(sizes, default=1)


def make_target(url: str, options: RequestOptions = RequestOptions(), pool_size: int = 100,
                **sagemaker_options) -> Target:
    """A target for ``http(s)://...`` (OpenAI-compatible) or ``sagemaker://ENDPOINT``."""
    if url.startswith("sagemaker://"):
        from .targets.sagemaker import SageMakerTarget

        return SageMakerTarget.from_url(url, options, pool_size=pool_size or 1000,
                                        **sagemaker_options)
    given = sorted(k for k, v in sagemaker_options.items() if v not in (None, "auto"))
    if given:
        raise ConfigError(f"{', '.join('--' + g.replace('_', '-') for g in given)} only apply to "
                          "sagemaker:// targets")
    from .targets.openai_http import OpenAIHTTPTarget

    return OpenAIHTTPTarget(url, options, pool_size=pool_size)


@contextlib.asynccontextmanager
async def _resolve_target(target: str | Target, options: RequestOptions, pool_size: int,
                          sagemaker_options: dict,
                          control: RunControl) -> AsyncIterator[tuple[Target, bool]]:
    """Yield an opened target, and whether it is the built-in simulator."""
    if target is None:
        raise ConfigError('no target: give a URL ("http://host:8000", "sagemaker://ENDPOINT"), '
                          'a Target object, or target="simulator" for the built-in simulator')
    if target == SIMULATOR:
        from .simulator import simulator_process

        with simulator_process() as url:
            async with _opened(make_target(url, options, pool_size), control) as opened:
                yield opened, True
        return
    if isinstance(target, str):
        target = make_target(target, options, pool_size, **sagemaker_options)
    async with _opened(target, control) as opened:
        yield opened, False


@contextlib.asynccontextmanager
async def _opened(target: Target, control: RunControl) -> AsyncIterator[Target]:
    """Open (preflight) ``target`` and always close it; a stop during the preflight ends it.

    A stalled server can hold a preflight for its whole timeout: Ctrl-C must not wait that out.
    """
    opening = asyncio.ensure_future(target.open())
    stopped_by_control = False

    def stop_opening() -> None:
        nonlocal stopped_by_control
        stopped_by_control = True
        opening.cancel()

    forget = control.on_stop(stop_opening)
    if control.stopped:
        stop_opening()
    try:
        await opening
    except asyncio.CancelledError:
        if stopped_by_control and opening.cancelled():
            raise RunStopped("stopped before any load was sent (during the target's "
                             "preflight): nothing was measured") from None
        raise
    finally:
        forget()
    try:
        yield target
    finally:
        await target.close()


async def _server_facts(target: Target) -> dict | None:
    """KV-cache facts from a vLLM HTTP server's /metrics; None when there are none to read."""
    info = target.describe()
    if info.get("kind") != "openai-http":
        return None  # SageMaker keeps /metrics inside the container: facts come from deploys
    from .server_metrics import fetch_server_facts

    try:
        facts = await fetch_server_facts(info["url"], timeout_s=5.0)
    except LoadgenError:
        return None  # not vLLM, or metrics disabled: nothing to sample either
    return {"source": "metrics", **facts}


async def _measure_level(target: Target, load: Load, sample_url: str | None,
                         interval_s: float, watchers: Sequence = (), **kwargs) -> LevelResult:
    """One level, with the server's /metrics sampled alongside it when there is a URL."""
    if sample_url is None:
        return await run_level(target, load, watchers=watchers, **kwargs)
    from .server_metrics import ServerMetricsSampler

    sampler = ServerMetricsSampler(sample_url, interval_s)
    level = await run_level(target, load, watchers=(sampler, *watchers), **kwargs)
    level.server = sampler.snapshot()
    return level


async def sweep(target: str | Target, *, loads: Sequence[Load], stop: StopRule,
                options: RequestOptions = RequestOptions(),
                prompts: Iterable[Prompt] | None = None,
                workload: WorkloadSettings = WorkloadSettings(),
                out: str | os.PathLike | None = None, control: RunControl | None = None,
                keep_records: bool = False,
                on_progress: Callable[[Load, dict], None] | None = None,
                on_level: Callable[[LevelResult], None] | None = None,
                on_start: Callable[[RunResult], None] | None = None,
                server_metrics_interval_s: float | None = 1.0,
                **sagemaker_options) -> Results:
    """Run each load level in turn against ``target``: a URL, a :class:`Target`, or
    ``"simulator"`` (the built-in simulator, in a child process).

    Each level is measured separately. With ``out``, the path is checked before any load is
    sent, and the results file is rewritten after every level (``"partial": true`` until the
    run ends), so an interrupted run keeps what it measured. If the file cannot be written
    at the end after all, it goes to a fallback file (``Results.path`` says where, ``write_error`` why).
    ``on_start(result)`` is called once the target answered its preflight, before any load.
    Against a vLLM HTTP server, its /metrics facts go to ``server`` and running/waiting
    requests and KV-cache use are sampled every ``server_metrics_interval_s`` during
    each level (None: don't).

    ``workload`` says what to send (when ``prompts`` is None: synthetic prompts, a
    tokenizer, a dataset), which SLOs judge each request, and what to export.
    """
    if not loads:
        raise ConfigError("give at least one load level (--concurrency or --rate)")
    if out is not None:
        check_writable(out)
    control = control or RunControl()
    if prompts is None:
        prompts = workload.prompt_source()
    if getattr(prompts, "turns", 1) > 1:  # a session's next turn carries the answers
        if options.api != "chat":
            raise ConfigError("multi-turn sessions (--turns) need --api chat")
        options = dataclasses.replace(options, keep_text=True)
    async with _resolve_target(target, options, pool_size_for(loads), sagemaker_options,
                               control) as (opened, simulated):
        with workload.open_exports() as exports:  # after the preflight: no empty files
            result = RunResult(target=opened.describe(), levels=[], started_at=now_iso(),
                               simulated=simulated)
            result.extra["workload"] = workload.describe(
                prompts if isinstance(prompts, PromptSource) else None)
            facts = await _server_facts(opened) if server_metrics_interval_s else None
            result.server = facts or {}
            sample_url = opened.describe()["url"] if facts is not None else None
            stream = PromptStream(prompts)
            measure = functools.partial(
                _measure_level, sample_url=sample_url,
                interval_s=server_metrics_interval_s or 1.0, stop=stop, prompts=stream,
                control=control, keep_records=keep_records, ids=RequestIds(),
                watchers=(exports.hdr,) if exports.hdr is not None else (),
                slos=workload.slos, sinks=exports.sinks)
            if on_start:
                on_start(result)
            for index, load in enumerate(loads, 1):
                if control.stopped:
                    break
                progress = (lambda snap, _l=load: on_progress(_l, snap)) if on_progress else None
                if getattr(prompts, "tokenizer", None) is not None:
                    stream.prefill(prefill_count(load, stop))  # off the level's clock
                exports.begin_level(index, load)
                level = await measure(opened, load, on_progress=progress)
                exports.end_level()
                result.levels.append(level)
                result.partial = True  # until the run has ended: a file written now is not complete
                if out is not None:
                    result.save(out)
                if on_level:
                    on_level(level)
            result.target = opened.describe()
            result.finished_at = now_iso()
            result.partial = control.stopped or len(result.levels) < len(loads)
            if out is not None:
                result.save(out)
            return Results.from_dict(result.to_dict(), [level.records for level in result.levels],
                                     result.path, result.write_error)


async def run(target: str | Target, *, load: Load, stop: StopRule,
              **kwargs) -> Results:
    """One level: ``sweep`` with a single load."""
    return await sweep(target, loads=[load], stop=stop, **kwargs)


__all__ = ["sweep", "run", "make_target", "SIMULATOR", "ConstantConcurrency", "ArrivalRate",
           "StopRule", "RequestOptions", "PromptSource", "RunControl", "WorkloadSettings"]
