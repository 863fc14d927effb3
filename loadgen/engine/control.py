"""Stopping a run from outside: the CLI's Ctrl-C handler, an MCP tool, user code."""

from __future__ import annotations

from typing import Callable


class RunControl:
    """Lets the caller stop a run early; the run still reports what it measured.

    After :meth:`stop` no new request starts, and requests in flight are cancelled at once
    (no graceful-stop period) and counted incomplete.
    """

    def __init__(self) -> None:
        self.stopped = False
        self._listeners: list[Callable[[], None]] = []

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            for listener in list(self._listeners):
                listener()

    def on_stop(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` (from the event loop's thread) when :meth:`stop` is called.
        Returns a function that removes the listener."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn)
