"""Workers as local processes (``--workers N``): fresh interpreters, never ``fork``.

A worker is ``python -m loadgen.workers FD``: spawned like multiprocessing's ``spawn``
but without re-importing the parent's ``__main__`` (for the CLI that costs a second or
more per worker), in its own session so that a terminal's Ctrl-C reaches only the
parent. Each child runs :class:`~loadgen.workers.worker.WorkerEngine` on its own event
loop (uvloop when ``loadgen[fast]`` is installed) and talks to the parent over one
``multiprocessing`` Connection on a socket pair, off the hot path:

    parent -> child   (RunConfig, Share, keep_records, start-count FD) first, then
                      ("warm_up", level, start_ns, load, stop) |
                      ("measure", level, start_ns, load, stop)
                      | ("stop",) | ("quit",)
    child -> parent   ("ready", info) | ("failed", message: it could not open its target,
                      warm up or measure) | ("warm",)
                      | ("progress", LevelReport) | ("level", LevelReport)

Children ignore SIGINT too (the parent decides, and sends "stop"). A child whose parent
disappears sees its pipe close, stops and exits: no orphans. CLOCK_MONOTONIC is
system-wide, so start instants need no conversion.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from .._compat import run as run_event_loop  # uvloop when installed
from ..engine import Share
from ..errors import LoadgenError, one_line
from ..runconfig import RunConfig
from .handle import WorkerDied, WorkerFailed
from ..load import Load, StopRule
from .payload import LevelReport
from .starts import StartCount
from .worker import HISTOGRAMS_EVERY_S, PROGRESS_EVERY_S, WorkerEngine


def watch(loop: asyncio.AbstractEventLoop, conn: Connection, readable: Callable[[], None]) -> None:
    """Call ``readable`` when ``conn`` has data. The pipe stays blocking (uvloop makes a
    watched descriptor non-blocking): a whole message is read or written at once, and a
    large final report is never cut off by EAGAIN."""
    loop.add_reader(conn.fileno(), readable)
    os.set_blocking(conn.fileno(), True)


# ----------------------------------------------------------------------------- the child


def child_main(fd: int) -> None:
    """Entry point of a worker process (``python -m loadgen.workers FD``): the run's
    configuration and this worker's share arrive first on the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        config, share, keep_records, starts_fd = conn.recv()
        worker = WorkerEngine(config, share, keep_records, StartCount(starts_fd))
        run_event_loop(_serve(worker, conn))
    except (BrokenPipeError, EOFError, ConnectionResetError):
        pass  # the parent is gone: nothing left to report to


async def _serve(worker: WorkerEngine, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[tuple] = asyncio.Queue()

    def readable() -> None:
        try:
            while conn.poll():
                message = conn.recv()
                if message[0] == "stop":
                    worker.stop()
                else:
                    commands.put_nowait(message)
        except (EOFError, OSError):  # the parent closed the pipe or died
            loop.remove_reader(conn.fileno())
            worker.stop()
            commands.put_nowait(("quit",))

    watch(loop, conn, readable)
    try:
        info = await worker.open()
    except LoadgenError as exc:
        conn.send(("failed", str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("failed", one_line(f"{type(exc).__name__}: {exc}")))
        return
    try:
        conn.send(("ready", info))
        while (command := await commands.get())[0] != "quit":
            try:
                if command[0] == "warm_up":
                    await worker.warm_up(*command[1:])
                    conn.send(("warm",))
                elif command[0] == "measure":
                    conn.send(("level", await _measure(worker, conn, *command[1:])))
            except LoadgenError as exc:  # the target cannot take the level: one line
                conn.send(("failed", str(exc)))
            except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
                conn.send(("failed", one_line(f"{type(exc).__name__}: {exc}")))
    finally:
        loop.remove_reader(conn.fileno())
        await worker.close()


async def _measure(worker: WorkerEngine, conn: Connection, level: int, start_ns: int,
                   load: Load, stop: StopRule) -> LevelReport:
    """Measure a level while a side task reports progress every half second."""

    async def report_progress() -> None:
        next_histograms = time.monotonic() + HISTOGRAMS_EVERY_S
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            full = time.monotonic() >= next_histograms
            report = worker.report(with_histograms=full)
            if report is not None:
                conn.send(("progress", report))
                if full:
                    next_histograms += HISTOGRAMS_EVERY_S

    reporter = asyncio.ensure_future(report_progress())
    try:
        return await worker.measure(level, start_ns, load, stop)
    finally:
        reporter.cancel()


# ----------------------------------------------------------------------------- the parent


class ProcessWorker:
    """The parent's handle on one worker process."""

    kind = "process"

    def __init__(self, config: RunConfig, share: Share, keep_records: bool) -> None:
        self.index = share.index
        self.starts = StartCount.create()  # readable here even if the process is killed
        self._starts_before = 0  # the count when the running level began
        self._job = (config, share, keep_records, self.starts.fd)
        self.process: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._reply: asyncio.Future | None = None
        self.info: dict[str, Any] = {"index": share.index}
        self.latest: LevelReport | None = None  # last progress report (counters)
        self.latest_full: LevelReport | None = None  # last one with histograms
        self.died: str | None = None  # why, once the process is gone
        self.clock_offset_ns = 0  # same host, same CLOCK_MONOTONIC
        self.on_report: Callable[[LevelReport], None] | None = None

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> dict:
        """Start the process; wait for its target to open (raises WorkerFailed/WorkerDied)."""
        loop = asyncio.get_running_loop()
        self._reply = loop.create_future()
        ours, theirs = socket.socketpair()
        with theirs:
            # Its own session: a terminal's Ctrl-C reaches the parent only, which stops
            # the workers through the pipe (and still collects what they measured).
            self.process = subprocess.Popen(
                [sys.executable, "-m", "loadgen.workers", str(theirs.fileno())],
                pass_fds=(theirs.fileno(), self.starts.fd), stdin=subprocess.DEVNULL,
                start_new_session=True)
        self._conn = Connection(ours.detach())
        self._send(self._job)
        watch(loop, self._conn, self._readable)
        message = await self._reply
        self.info.update(message[1], pid=self.process.pid)
        return self.info

    def stop(self) -> None:
        self._send(("stop",))

    async def close(self, timeout_s: float = 5.0) -> None:
        """Ask the process to quit, then make sure it is gone (terminate, kill)."""
        self._send(("quit",))
        if self.process is not None:
            await asyncio.to_thread(self._reap, timeout_s)
        if self._conn is not None:
            self._forget_reader()
            self._conn.close()
        self.starts.close()

    def _reap(self, timeout_s: float) -> None:
        assert self.process is not None
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(2.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    # -- levels -------------------------------------------------------------------------
    async def warm_up(self, level: int, start_ns: int | None, load: Load,
                      stop: StopRule) -> None:
        await self._call(("warm_up", level, start_ns, load, stop))

    async def measure(self, level: int, start_ns: int, load: Load,
                      stop: StopRule) -> LevelReport:
        self.latest = self.latest_full = None
        self._starts_before = self.starts.value  # nothing measured runs between levels
        return (await self._call(("measure", level, start_ns, load, stop)))[1]

    def started_in_level(self) -> int:
        """Measured requests this worker started in the running level, exact even after
        it was killed (:mod:`~loadgen.workers.starts`)."""
        return self.starts.value - self._starts_before

    # -- the pipe -----------------------------------------------------------------------
    async def _call(self, message: tuple) -> tuple:
        if self.died:
            raise WorkerDied(self.died)
        self._reply = asyncio.get_running_loop().create_future()
        self._send(message)
        return await self._reply

    def _send(self, message: tuple) -> None:
        if self.died or self._conn is None:
            return
        try:
            self._conn.send(message)
        except (OSError, ValueError):
            pass  # already gone: the reader reports it

    def _readable(self) -> None:
        try:
            while self._conn.poll():
                self._receive(self._conn.recv())
        except (EOFError, OSError):
            self._gone()

    def _receive(self, message: tuple) -> None:
        if message[0] in ("progress", "level") and self.on_report is not None:
            self.on_report(message[1])
        if message[0] == "progress":
            self.latest = message[1]
            if message[1].histograms is not None:
                self.latest_full = message[1]
        elif message[0] == "failed":
            self._settle(WorkerFailed(message[1]))
        elif self._reply is not None and not self._reply.done():
            self._reply.set_result(message)

    def _gone(self) -> None:
        self._forget_reader()
        assert self.process is not None
        try:
            code = self.process.wait(1.0)
        except subprocess.TimeoutExpired:  # closed its end without exiting: make it exit
            self.process.kill()
            code = self.process.wait()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        self.died = f"worker {self.index} (pid {self.process.pid}) {how}"
        self._settle(WorkerDied(self.died))

    def _settle(self, exc: Exception) -> None:
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(exc)

    def _forget_reader(self) -> None:
        try:
            asyncio.get_running_loop().remove_reader(self._conn.fileno())
        except (OSError, ValueError, RuntimeError):
            pass
