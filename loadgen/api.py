"""The programmatic async API. The CLI is a thin layer over these functions.

    import asyncio, loadgen
    result = asyncio.run(loadgen.sweep("http://127.0.0.1:8000",
                                       loads=[loadgen.ConstantConcurrency(c) for c in (1, 4, 16)],
                                       stop=loadgen.StopRule(requests=50)))
    print(result.levels[0].output_tokens_per_s, result.levels[0].ttft_ms.p99)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import sys
from typing import Any, Callable, Sequence

from .atomic import check_writable, rewritable, same_file
from .config import RequestOptions
from .engine import LevelResult, RunControl
from .errors import ConfigError
from .load import ArrivalRate, ConstantConcurrency, Load, StopRule
from .measure import measure_level, measure_on_workers
from .measurement import Measurement
from .record import now_iso
from .results import Results
from .runconfig import SIMULATOR, CloudWatchSettings, RunConfig, TargetConfig, Workers, build_run
from .run_target import OpenedTarget, open_for_runs
from .saturation import level_plan, plan_loads
from .targets.base import Target
from .targets.factory import make_target, pool_size_for
from .workload.prompts import PromptSource, PromptStream, prefill_count
from .workload.settings import WorkloadSettings

# ``target=SIMULATOR`` ("simulator"): the built-in vLLM simulator, started in a child
# process for the run (declared with the target: :mod:`loadgen.runconfig`).


_UNSET: Any = object()  # "not given": tells a keyword left alone from one set to its default


def build_config(target: str | None = None, *, loads: Sequence[Load] = (),
                 stop: StopRule | None = None, options: RequestOptions | None = None,
                 prompts: PromptSource | None = None,
                 workload: WorkloadSettings | None = None,
                 measurement: Measurement | None = None,
                 server_metrics_interval_s: float | None = _UNSET, workers: Workers = _UNSET,
                 ray: str | None = None, **run_options: Any) -> RunConfig:
    """The :class:`RunConfig` that ``sweep``'s keywords describe (the one place they meet).

    ``run_options`` are the run options by name (:func:`loadgen.runconfig.run_options`:
    the CLI's options, ``concurrency=[1, 4]``, ``requests=50``, ``slos=["ttft_ms<=500"]``,
    ``region=...``); the objects (``loads``, ``stop``, ``options``, ``workload``) replace
    what the names describe. An unknown name is a one-line error."""
    flat = dict(run_options)
    for key, value in (("target", target), ("ray", ray), ("workers", workers),
                       ("server_metrics_interval_s", server_metrics_interval_s)):
        if value is not _UNSET and value is not None:
            flat[key] = value
    config = build_run(flat, where="keyword")
    replaced = {name: value for name, value in (("stop", stop), ("options", options),
                                                ("workload", workload), ("prompts", prompts),
                                                ("measurement", measurement))
                if value is not None}
    if loads:
        replaced["loads"] = tuple(loads)
    return dataclasses.replace(config, **replaced) if replaced else config


async def sweep(target: str | Target | None = None, *, loads: Sequence[Load] = (),
                stop: StopRule | None = None, options: RequestOptions | None = None,
                prompts: PromptSource | None = None,
                workload: WorkloadSettings | None = None,
                measurement: Measurement | None = None,
                out: str | os.PathLike | None = None, control: RunControl | None = None,
                keep_records: bool = False,
                on_progress: Callable[[Load, dict], None] | None = None,
                on_level: Callable[[LevelResult], None] | None = None,
                on_start: Callable[[Results], None] | None = None,
                server_metrics_interval_s: float | None = _UNSET,
                workers: Workers = _UNSET, ray: str | None = None,
                config: RunConfig | None = None, log: Callable[[str], None] | None = None,
                **run_options: Any) -> Results:
    """Run each load level in turn against ``target``: a URL, a :class:`Target`, or
    ``"simulator"`` (the built-in simulator, in a child process).

    The run is described by keywords or given whole as ``config=RunConfig(...)``, not both.
    The keywords are every run option by name, with the CLI's defaults
    (:func:`loadgen.runconfig.run_options`: ``concurrency=[1, 4]``, ``requests=50``,
    ``slos=["ttft_ms<=500"]``, ``turns=3``, ``profile="saturation"``, ``region=...``); the
    objects ``loads``, ``stop``, ``options``, ``workload``, ``measurement`` and ``prompts``
    replace the part they describe.

    Each level is measured separately. With ``out``, the path is checked before any load is
    sent and the file is rewritten after every level (``"partial": true`` until the run
    ends); if it cannot be written at the end, it goes to a fallback file
    (``Results.path``, ``write_error``). ``on_start(result)`` is called once the target
    answered its preflight. Against a vLLM HTTP server its /metrics facts go to ``server``
    and its gauges are sampled every ``server_metrics_interval_s`` during each level.
    ``workers``/``ray`` generate each level with worker processes or Ray actors; ``log``
    gets their one-line warnings (default: stderr).
    """
    given_object = target if target is not None and not isinstance(target, str) else None
    if config is None:
        if target is None:
            raise ConfigError('no target: give a URL ("http://host:8000", '
                              '"sagemaker://ENDPOINT"), a Target object, or target="simulator" '
                              "for the built-in simulator")
        url = None if given_object is not None else target
        config = build_config(url, loads=loads, stop=stop, measurement=measurement,
                              options=options, prompts=prompts, workload=workload,
                              server_metrics_interval_s=server_metrics_interval_s,
                              workers=workers, ray=ray, **run_options)
    else:
        keywords = {"target": target, "loads": loads or None, "stop": stop, "options": options,
                    "prompts": prompts, "workload": workload, "measurement": measurement,
                    "ray": ray, **run_options,
                    "server_metrics_interval_s": server_metrics_interval_s, "workers": workers}
        given = [name for name, value in keywords.items() if value not in (None, _UNSET)]
        if given:
            raise ConfigError(f"pass either config=RunConfig(...) or {', '.join(given)}, "
                              "not both")
    return await run_config(config, target=given_object, out=out, control=control,
                            keep_records=keep_records, on_progress=on_progress,
                            on_level=on_level, on_start=on_start, log=log)


async def run_config(config: RunConfig, *, target: Target | None = None,
                     out: str | os.PathLike | None = None, control: RunControl | None = None,
                     keep_records: bool = False,
                     on_progress: Callable[[Load, dict], None] | None = None,
                     on_level: Callable[[LevelResult], None] | None = None,
                     on_start: Callable[[Results], None] | None = None,
                     log: Callable[[str], None] | None = None) -> Results:
    """Run ``config`` (see :func:`sweep`; ``config.target.url`` None: the built-in
    simulator); ``target``: an already built Target to use instead of ``config.target`` (one
    process only: workers build their own from the URL). Returns the run's :class:`Results`
    (each level's ``measured``: the engine's :class:`LevelResult`)."""
    if out is not None:
        check_writable(out)
        _check_distinct(out, config.measurement)
    control = control or RunControl()
    prompts = config.prompts if config.prompts is not None else config.workload.prompt_source()
    config = dataclasses.replace(config, prompts=prompts)
    options = config.options
    if getattr(prompts, "turns", 1) > 1:  # a session's next turn carries the answers
        if options.api != "chat":
            raise ConfigError("multi-turn sessions (--turns) need --api chat")
        options = dataclasses.replace(options, keep_text=True)
        config = dataclasses.replace(config, options=options)  # workers build from it
    if _scaled(config, in_process_target=target is not None):
        if target is not None:
            raise ConfigError("workers build their own target: pass a URL, not a Target object")
        config = config.for_workers(prompts)  # one-line errors for what can't be split yet
    async with open_for_runs(target or config.target.url or SIMULATOR, options,
                             pool_size=pool_size_for(plan_loads(config)),
                             sagemaker_options=config.target.sagemaker_options(),
                             control=control,
                             server_facts=bool(config.server_metrics_interval_s)) as opened:
        return await run_on(opened, config, out=out, control=control,
                            keep_records=keep_records, on_progress=on_progress,
                            on_level=on_level, on_start=on_start, log=log)


def level_metrics_fetcher(target: dict[str, Any], settings: CloudWatchSettings,
                          control: RunControl) -> Any:
    """For a ``sagemaker://`` target: what reads each level's endpoint metrics from
    CloudWatch (:class:`loadgen.aws.level_metrics.LevelMetricsFetcher`); None otherwise."""
    if target.get("kind") != "sagemaker":
        return None
    from .aws.level_metrics import LevelMetricsFetcher

    fetcher = LevelMetricsFetcher(target, settings)
    control.on_stop(fetcher.stop)  # Ctrl-C: keep what has arrived
    return fetcher


def _check_distinct(out: str | os.PathLike, measurement: Measurement) -> None:
    """An export written into the results file would destroy both: refuse before any load."""
    if measurement.save_requests and same_file(out, measurement.save_requests):
        raise ConfigError(f"--save-requests {measurement.save_requests} and --out {out} are "
                          "the same file; give each its own path")


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _scaled(config: RunConfig, in_process_target: bool = False, prompts: Any = None) -> bool:
    """Whether worker processes (or Ray actors) generate the load."""
    return config.worker_count(in_process_target, prompts) > 1 or config.ray is not None


async def run_on(opened: OpenedTarget, config: RunConfig, *,
                 out: str | os.PathLike | None = None, control: RunControl | None = None,
                 keep_records: bool = False,
                 on_progress: Callable[[Load, dict], None] | None = None,
                 on_level: Callable[[LevelResult], None] | None = None,
                 on_start: Callable[[Results], None] | None = None,
                 log: Callable[[str], None] | None = None) -> Results:
    """Run ``config``'s levels on a target already opened (:func:`open_for_runs`, with
    the run's request options): :func:`run_config` without the preflight and the server
    facts, which ``opened`` has. With ``config.workers`` > 1 (or Ray) the workers still
    open their own targets from the URL; the levels' /metrics are sampled from here."""
    plan = level_plan(config)
    control = control or RunControl()
    workload = config.workload
    prompts = config.prompts if config.prompts is not None else workload.prompt_source()
    choice = config.worker_choice(opened.given, prompts)  # how many processes, and why
    async with contextlib.AsyncExitStack() as stack:
        pool = None
        if _scaled(config, opened.given, prompts):
            from .workers import worker_pool

            config = config.for_workers(prompts)
            if opened.simulated:  # the simulator this run started
                config = config.with_target(opened.target.describe()["url"])
            pool = await stack.enter_async_context(worker_pool(config, choice.workers,
                                                               keep_records=keep_records,
                                                               log=log))
            stack.callback(control.on_stop(pool.stop))
        exports = stack.enter_context(  # after the preflight
            config.measurement.open_exports(log or _to_stderr))
        levels: list[LevelResult] = []
        extra: dict[str, Any] = {"workload": {**workload.describe(
            prompts if isinstance(prompts, PromptSource) else None),
            **config.measurement.describe()}, "worker_choice": choice.to_dict()}
        if pool is not None:
            extra["workers"] = pool.describe()
        # The run so far: its results are rebuilt (and the file rewritten) after each level.
        so_far = functools.partial(Results.of_run, started_at=now_iso(),
                                   simulated=opened.simulated, server=dict(opened.server))
        target = opened.target.describe()  # as the preflight left it (the end's: below)
        result = so_far(target=target, levels=levels, extra=extra)
        sample_url = opened.metrics_url if config.server_metrics_interval_s else None
        cloudwatch = level_metrics_fetcher(opened.target.describe(), config.cloudwatch, control)
        stream = PromptStream(prompts)
        measure = functools.partial(
            measure_level, sample_url=sample_url,
            interval_s=config.server_metrics_interval_s or 1.0, stop=config.stop,
            prompts=stream, control=control, keep_records=keep_records, ids=opened.ids,
            watchers=(exports.hdr,) if exports.hdr is not None else (),
            slos=config.measurement.slos, sinks=exports.sinks, quiet_gc=config.quiet_gc)
        for warning in result.target.get("warnings", ()):  # the preflight's (no /v1/models...)
            (log or _to_stderr)(f"warning: {warning}")
        if on_start:
            on_start(result)
        for index in itertools.count():
            load = plan.next_level(index)
            if load is None or control.stopped or (pool is not None and pool.broken):
                break
            progress = (lambda snap, _l=load: on_progress(_l, snap)) if on_progress else None
            if pool is None and getattr(prompts, "tokenizer", None) is not None:
                stream.prefill(prefill_count(load, config.stop),  # off the level's clock
                               start=opened.ids.prompts)
            exports.begin_level(index + 1, load)
            if pool is not None:
                level = await measure_on_workers(pool, index, load, config, sample_url, control,
                                                 progress, exports)
                extra["workers"] = pool.describe()
            else:
                level = await measure(opened.target, load, on_progress=progress)
            exports.end_level()
            if cloudwatch is not None:
                cloudwatch.start(level)  # in the background: the next level goes on
            levels.append(level)
            plan.measured(level)
            if hasattr(plan, "describe"):  # a search: where it stands, in the file
                extra["profile"] = plan.describe()
            if exports.sinks:
                extra["exports"] = exports.describe()
            if out is not None and rewritable(out):  # a device or FIFO gets one document
                # partial until the run has ended: a file written now is not complete
                result = so_far(target=target, levels=levels, extra=extra,
                                partial=True).save(out, after=result)
            if on_level:
                on_level(level)
        if hasattr(plan, "describe"):  # how the search ended (it decided after the last level)
            extra["profile"] = plan.describe()
        exports.close()  # its last writes can fail too: the results file says so
        if exports.sinks:
            extra["exports"] = exports.describe()
        stopped = control.stopped  # a Ctrl-C while CloudWatch is awaited cuts only that wait
        if cloudwatch is not None:
            await cloudwatch.finish(log)
        partial = (stopped or plan.next_level(len(levels)) is not None
                   or any(level.partial for level in levels))
        ended = so_far(target=opened.target.describe(), levels=levels, extra=extra,
                       finished_at=now_iso(), partial=partial)
        return ended.save(out, after=result) if out is not None else ended


async def run(target: str | Target | None = None, *, load: Load | None = None,
              stop: StopRule | None = None, **kwargs) -> Results:
    """One level: ``sweep`` with a single load (or ``config=`` holding one)."""
    if load is not None:
        kwargs["loads"] = [load]
    return await sweep(target, stop=stop, **kwargs)


__all__ = ["sweep", "run", "run_config", "run_on", "open_for_runs", "OpenedTarget",
           "build_config", "make_target", "SIMULATOR", "RunConfig", "TargetConfig",
           "ConstantConcurrency", "ArrivalRate", "StopRule", "RequestOptions", "PromptSource",
           "RunControl", "WorkloadSettings", "Measurement"]
