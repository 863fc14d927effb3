"""How many measured requests a worker process has started, readable by the parent even
after the worker was killed (``kill -9``, the OOM killer): one 64-bit counter in a small
unlinked file that both processes map into memory.

The worker adds one as each measured request starts (:attr:`loadgen.engine.LevelRun.on_start`:
a memory write, no IPC on the hot path). When a worker dies mid-level, the parent reads
the count: the requests it started that its last report does not hold are counted
``incomplete`` (reason ``worker_died``), so the run's completed + failed + incomplete
still equals what the server received. Ray actors live on other hosts: they have no such
counter and their count comes from their last progress report (at most half a second old).
"""

from __future__ import annotations

import mmap
import tempfile


class StartCount:
    """A counter shared through ``fd`` (the parent :meth:`create` s it; the worker maps the
    same descriptor, passed to it at spawn)."""

    SIZE = 8

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, self.SIZE)
        self._view = memoryview(self._map).cast("q")

    @classmethod
    def create(cls) -> "StartCount":
        file = tempfile.TemporaryFile()  # unlinked: gone with the last descriptor
        file.truncate(cls.SIZE)
        count = cls(file.fileno())
        count._file = file  # keeps the descriptor open as long as the counter
        return count

    def add(self) -> None:
        self._view[0] += 1

    @property
    def value(self) -> int:
        return self._view[0]

    def close(self) -> None:
        self._view.release()
        self._map.close()
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()
