"""The target a run goes through: a URL, a :class:`Target` or ``"simulator"`` (the built-in
simulator, started in a child process), opened (its preflight, which a stop cuts short),
with its server's /metrics facts read once (:func:`open_for_runs`); closed at the end."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any, AsyncIterator

from .config import RequestOptions
from .engine import RequestIds, RunControl
from .errors import ConfigError, LoadgenError, RunStopped
from .results import server_section
from .targets.base import Target
from .targets.factory import make_target
from .targetspec import SIMULATOR


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
        yield opened, bool(getattr(opened, "simulator", False))  # a mock-server says so


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
    """The results' ``server`` section from a vLLM HTTP server's /metrics; None when there
    are no facts to read."""
    info = target.describe()
    if info.get("kind") != "openai-http":
        return None  # SageMaker keeps /metrics inside the container: facts come from deploys
    from .vllm.server_metrics import fetch_server_facts

    try:
        facts = await fetch_server_facts(info["url"], timeout_s=5.0)
    except LoadgenError:
        return None  # not vLLM, or metrics disabled: nothing to sample either
    return server_section("metrics", facts)


@dataclasses.dataclass(frozen=True)
class OpenedTarget:
    """A target opened for one or more runs (:func:`run_on`): its preflight and the read of
    its server's /metrics facts happen once, however many runs go through it (a scenario
    phase runs every measurement on one)."""

    target: Target
    simulated: bool  # the built-in simulator, started for these runs
    server: dict[str, Any]  # the results' ``server`` section ({} when nothing is known)
    metrics_url: str | None  # where levels sample /metrics (None: not a vLLM HTTP server)
    # Request ids stay unique over every run on the target (server logs can be matched).
    ids: RequestIds = dataclasses.field(default_factory=RequestIds)
    given: bool = False  # a Target object the caller built (workers cannot share it)


@contextlib.asynccontextmanager
async def open_for_runs(target: str | Target, options: RequestOptions, *, pool_size: int = 100,
                        sagemaker_options: dict[str, Any] | None = None,
                        control: RunControl | None = None,
                        server_facts: bool = True) -> AsyncIterator[OpenedTarget]:
    """Open ``target`` (a URL, a :class:`Target`, or ``"simulator"``) for runs with
    ``options`` on at most ``pool_size`` connections; with ``server_facts``, read its
    server's /metrics facts. Closed (and a simulator stopped) when the block ends."""
    async with _resolve_target(target, options, pool_size, sagemaker_options or {},
                               control or RunControl()) as (opened, simulated):
        facts = await _server_facts(opened) if server_facts else None
        yield OpenedTarget(opened, simulated, server=facts or {},
                           metrics_url=opened.describe()["url"] if facts is not None else None,
                           given=not isinstance(target, str))
