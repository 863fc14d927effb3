"""What the parent needs from a worker, whether a local process or a Ray actor."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ..errors import LoadgenError, TargetError
from ..load import Load, StopRule
from .payload import LevelReport


class WorkerFailed(TargetError):
    """A worker could not start (its target's preflight failed, ...): one line why."""


class WorkerDied(LoadgenError):
    """A worker vanished mid-run; what it reported before is kept."""


class WorkerHandle(Protocol):
    index: int
    kind: str  # "process" or "ray"
    info: dict[str, Any]  # worker, pid, node (+ clock offset for Ray)
    latest: LevelReport | None  # the running level's last progress report
    latest_full: LevelReport | None  # ... the last one carrying histograms
    died: str | None  # one line, once the worker is gone
    clock_offset_ns: int  # worker clock − parent clock
    on_report: Callable[[LevelReport], None] | None  # sees every report of a level

    async def start(self) -> dict[str, Any]: ...

    # The parent's plan picks each level: its load and stop rule go with the command.
    async def warm_up(self, level: int, start_ns: int | None, load: Load,
                      stop: StopRule) -> None: ...

    async def measure(self, level: int, start_ns: int, load: Load,
                      stop: StopRule) -> LevelReport: ...

    def started_in_level(self) -> int: ...  # measured requests started in the running level

    def stop(self) -> None: ...

    async def close(self) -> None: ...
