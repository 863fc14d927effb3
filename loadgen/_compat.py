"""What differs between Python 3.10 and 3.11+, and whether uvloop is installed: decided
here once, so the rest of the code base imports one name.

- ``TaskGroup``: ``asyncio.TaskGroup`` (3.11+) or the ``taskgroup`` backport (3.10).
- :func:`new_event_loop` / :func:`run`: uvloop when the optional ``fast`` extra is
  installed, else asyncio's default loop.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Coroutine

if sys.version_info < (3, 11):  # pragma: no cover
    from taskgroup import TaskGroup
else:
    from asyncio import TaskGroup


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (the ``fast`` extra), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` on :func:`new_event_loop`'s loop (Python 3.10 compatible)."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(main)
    loop = new_event_loop()  # pragma: no cover (3.10)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


__all__ = ["TaskGroup", "new_event_loop", "run"]
