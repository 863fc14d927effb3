"""Streaming HTTP/1.1 connections: one ``asyncio.Protocol`` per socket, a pool sized to the load.

Why not aiohttp on the hot path: at a few hundred streams every chunk of every stream costs a
task wake-up and a trip through aiohttp's reader, and a burst of requests costs a few hundred
µs each in its request path, which lands in TTFT. Here the timestamp is taken once in
``data_received`` and the response is parsed (llhttp), de-chunked and handed to the target's
handler right there; the request's task wakes once, when the response ends or fails.

Connections (what real servers do to them):

- :meth:`HTTPPool.open_connections` opens them before a level starts, so connection setup
  never lands in a measured TTFT.
- A connection the server closed while idle (idle timeout, close after each response as
  llama.cpp does) is noticed by ``connection_lost`` and never handed out again.
- ``Connection: close`` in a response is honoured: that connection is closed after it.
- A request whose reused connection closes before any byte of the response arrived (the
  server closed it as the request went out) is retried once on a fresh connection and
  counted in ``reconnects``; it is not a failure.
- Idle and total timeouts are checked by one sweeper task per pool, not a timer per read.

The fast path (closed loop): when a response ends inside ``data_received`` on a connection
that stays open, the request's :class:`FollowUp` gives the stream's next request, already
built, and it is written right there, before the task has woken (the raw client's trick,
``benchmarks/raw_client.py``); the task then finds it in flight (:class:`InFlight`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol
from urllib.parse import urlsplit

from ..codecs.http1 import ProtocolError, ResponseHandler, ResponseReader
from ..config import Timeouts
from ..errors import TargetError, one_line

_RETRY = "retry"  # an exchange's outcome: send it again on a fresh connection
_DONE = "done"


@dataclass
class PoolStatistics:
    """Counters since the pool was created; a level reports the difference."""

    connections_opened: int = 0
    reconnects: int = 0  # requests retried because the server closed a reused connection
    closed_by_server: int = 0  # connections the server closed (idle, after a response, ...)
    connect_failures: int = 0
    sent_on_completion: int = 0  # requests the fast path wrote as the previous one ended

    def snapshot(self) -> dict[str, int]:
        return dict(vars(self))


class FollowUp(Protocol):
    """A closed-loop stream's next request, asked for when its current response ends."""

    def next_request(self, end_ns: int) -> tuple[bytes, ResponseHandler] | None:
        """The next request's bytes and response handler, due at ``end_ns`` (None: not now)."""

    def sent(self, in_flight: InFlight, sent_ns: int) -> None:
        """The bytes from :meth:`next_request` were written at ``sent_ns``."""


class InFlight:
    """One request/response on a connection (fast path: ``started`` of :meth:`HTTPPool.request`)."""

    __slots__ = ("conn", "data", "handler", "future", "follow", "started_ns", "last_read_ns",
                 "reused")

    def __init__(self, conn: _Connection, data: bytes, handler: ResponseHandler,
                 future: asyncio.Future, follow: FollowUp | None, now_ns: int,
                 reused: bool) -> None:
        self.conn = conn
        self.data = data  # kept to send again on a fresh connection (retry)
        self.handler = handler
        self.future = future
        self.follow = follow
        self.started_ns = now_ns
        self.last_read_ns = now_ns
        self.reused = reused  # the connection had served a response before this request


class _Connection(asyncio.Protocol):
    def __init__(self, pool: HTTPPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.reader = ResponseReader()
        self.exchange: InFlight | None = None
        self.served = 0
        self.closed = False

    # -- asyncio callbacks ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()  # the one clock read per socket read, before parsing
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: the connection can't be trusted
            self.abort()
            return
        exchange.last_read_ns = now
        reader = self.reader
        try:
            reader.feed(data, now)
        except ProtocolError as err:
            self._finish(_DONE, ("bad_response", str(err)), now)
            self.abort()
            return
        if reader.complete:
            self._finish(_DONE, None, now)
            if not reader.keep_alive or self.closed:
                self.abort()
            elif exchange.follow is None or not self._send_follow_up(exchange.follow, now):
                self.pool._release(self)

    def _send_follow_up(self, follow: FollowUp, end_ns: int) -> bool:
        """The fast path: write the stream's next request now, on this connection."""
        upcoming = follow.next_request(end_ns)
        if upcoming is None:
            return False
        sent_ns = self.send(*upcoming, asyncio.get_running_loop().create_future(), follow)
        self.pool.stats.sent_on_completion += 1
        follow.sent(self.exchange, sent_ns)  # type: ignore[arg-type]
        return True

    def eof_received(self) -> bool:
        return False  # half-closed by the server: close our side too (-> connection_lost)

    def connection_lost(self, exc: Exception | None) -> None:
        now = time.perf_counter_ns()
        self.closed = True
        self.pool._forget(self)
        exchange = self.exchange
        if exchange is None:
            return
        if self.reader.end_of_stream(now):  # a body that runs until the connection closes
            self._finish(_DONE, None, now)
        elif self.reader.bytes_in == 0 and exchange.reused:
            self._finish(_RETRY, None, now)
        else:
            detail = f": {one_line(exc)}" if exc else ""
            self._finish(_DONE, ("disconnected", f"server closed the connection after "
                                 f"{self.reader.bytes_in} response bytes{detail}"), now)

    # -- used by the pool -------------------------------------------------------------------
    def send(self, data: bytes, handler: ResponseHandler, future: asyncio.Future,
             follow: FollowUp | None = None) -> int:
        """Write one request; returns the time the bytes were handed to the kernel."""
        self.exchange = InFlight(self, data, handler, future, follow, time.perf_counter_ns(),
                                 self.served > 0)
        self.reader.begin(handler)
        assert self.transport is not None
        self.transport.write(data)
        return time.perf_counter_ns()

    def fail(self, error_type: str, message: str) -> None:
        """Give up on the current exchange (timeout) and drop the connection."""
        self._finish(_DONE, (error_type, message), time.perf_counter_ns())
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, outcome: str, error: tuple[str, str] | None, now_ns: int) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is None:
            return
        self.served += 1
        if error is not None:
            exchange.handler.on_failure(error[0], error[1], now_ns)
        if not exchange.future.done():
            exchange.future.set_result(outcome)


class HTTPPool:
    """At most ``limit`` connections to one ``host:port`` (0 = no limit), kept alive."""

    def __init__(self, host: str, port: int, *, tls: bool, timeouts: Timeouts,
                 limit: int = 0) -> None:
        self.host, self.port = host, port
        self.timeouts = timeouts
        self.limit = limit
        self._ssl = ssl.create_default_context() if tls else None
        self._idle: deque[_Connection] = deque()
        self._busy: set[_Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future] = deque()
        self._sweeper: asyncio.Task | None = None
        self.stats = PoolStatistics()

    @classmethod
    def for_url(cls, url: str, timeouts: Timeouts, limit: int = 0) -> HTTPPool:
        """A started pool for ``url``'s scheme, host and port."""
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        pool = cls(parts.hostname or "", parts.port or (443 if tls else 80), tls=tls,
                   timeouts=timeouts, limit=limit)
        pool.start()
        return pool

    def statistics(self) -> dict[str, int]:
        return {**self.stats.snapshot(), "idle": len(self._idle), "busy": len(self._busy)}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the timeout sweeper (the pool owns it; :meth:`close` ends it)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
        for conn in [*self._idle, *self._busy]:
            conn.abort()
        self._idle.clear()
        for waiter in self._waiters:
            waiter.cancel()
        await asyncio.sleep(0)  # let the transports run their connection_lost

    async def open_connections(self, count: int) -> None:
        """Have at least ``count`` idle-or-busy connections open (bounded by the limit).
        This runs before any load, where a failure means the target can't take the load:
        :class:`TargetError`, one line."""
        want = count if not self.limit else min(count, self.limit)
        ensure_open_files(want + _SPARE_FILES)
        missing = want - len(self._idle) - len(self._busy) - self._opening
        if missing <= 0:
            return
        results = await asyncio.gather(*(self._connect() for _ in range(missing)),
                                       return_exceptions=True)
        failure = None
        for result in results:
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                self._release(result)
        if failure is not None:
            raise TargetError(f"cannot open {want} connections to {self.host}:{self.port} "
                              f"({type(failure).__name__}: {one_line(failure)}); is the server "
                              "accepting that many?") from None

    # -- requests -------------------------------------------------------------------------------
    async def request(self, data: bytes, handler: ResponseHandler,
                      on_sent: Callable[[int], None], follow: FollowUp | None = None,
                      started: InFlight | None = None) -> None:
        """Send ``data`` and feed the response to ``handler``; returns when it has ended.
        ``follow``: the stream's next request, for the fast path. ``started``: this
        request was already written by the fast path (``data`` and ``handler`` are its).

        Failures go to ``handler.on_failure``; only ``CancelledError`` propagates.
        """
        loop = asyncio.get_running_loop()
        if started is not None:
            data = started.data  # as written (a signature may have been renewed)
        for attempt in (0, 1):
            if attempt == 0 and started is not None:
                conn, future = started.conn, started.future
            else:
                try:
                    # The retry takes a new connection: another idle one may be just as stale.
                    conn = await (self._connect_busy() if attempt else self._acquire())
                except (OSError, asyncio.TimeoutError) as err:
                    self.stats.connect_failures += 1
                    handler.on_failure(*_connect_failure(err, self.timeouts),
                                       time.perf_counter_ns())
                    return
                future = loop.create_future()
                on_sent(conn.send(data, handler, future, follow))
            try:
                outcome = await future
            except asyncio.CancelledError:
                # The caller keeps what arrived; no failure is recorded. A request the fast
                # path sent on this connection meanwhile goes too: its stream is cancelled.
                conn.exchange = None
                conn.abort()
                raise
            if outcome != _RETRY:
                return
            self.stats.reconnects += 1
            if attempt:  # a fresh connection was closed without an answer too: a real failure
                handler.on_failure("disconnected", "the server closed the connection "
                                   "before answering", time.perf_counter_ns())

    async def _acquire(self) -> _Connection:
        idle, busy = self._idle, self._busy
        while True:
            while idle:
                conn = idle.pop()  # most recently used first: least likely to have timed out
                if not conn.closed:
                    busy.add(conn)
                    return conn
            if not self.limit or len(busy) + self._opening < self.limit:
                conn = await self._connect()
                busy.add(conn)
                return conn
            # Every allowed connection is busy: wait until one is released or closes.
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    async def _connect_busy(self) -> _Connection:
        conn = await self._connect()
        self._busy.add(conn)
        return conn

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port,
                                       ssl=self._ssl),
                self.timeouts.connect_s)
        except BaseException:
            self._opening -= 1
            self._wake_one()  # the slot this attempt held is free again
            raise
        self._opening -= 1
        self.stats.connections_opened += 1
        return conn

    def _release(self, conn: _Connection) -> None:
        self._busy.discard(conn)
        self._idle.append(conn)
        self._wake_one()

    def _forget(self, conn: _Connection) -> None:
        """A connection closed (by either side): it is never handed out again."""
        if conn.exchange is None and conn in self._idle:
            self.stats.closed_by_server += 1
        try:
            self._idle.remove(conn)
        except ValueError:
            pass
        self._busy.discard(conn)
        self._wake_one()  # a request waiting for a free slot may now open a new connection

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _sweep(self) -> None:
        """Fail exchanges that went quiet for longer than the idle timeout, or ran past the total."""
        timeouts = self.timeouts
        idle_ns, total_ns = int(timeouts.idle_s * 1e9), int(timeouts.total_s * 1e9)
        interval = max(0.01, min(1.0, timeouts.idle_s / 4, timeouts.total_s / 4))
        message = (f"no data within the timeouts (connect {timeouts.connect_s}s, "
                   f"idle {timeouts.idle_s}s, total {timeouts.total_s}s)")
        while True:
            await asyncio.sleep(interval)
            now = time.perf_counter_ns()
            for conn in list(self._busy):
                exchange = conn.exchange
                if exchange is not None and (now - exchange.last_read_ns > idle_ns
                                             or now - exchange.started_ns > total_ns):
                    conn.fail("timeout", message)


_SPARE_FILES = 64  # descriptors for everything that is not a connection (files, pipes, DNS)


def ensure_open_files(needed: int) -> None:
    """Raise this process's open-file limit to ``needed`` if the hard limit allows (1,024 is a
    common default, too few for 1,000 streams); else a one-line :class:`TargetError`."""
    try:
        import resource
    except ImportError:  # not on this platform: let connect() report it
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise TargetError(f"{needed - _SPARE_FILES} connections need about {needed} open "
                                 f"files but this process may open at most {hard}; raise the "
                                 f"limit (ulimit -n {needed}) or lower the concurrency")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _connect_failure(err: BaseException, timeouts: Timeouts) -> tuple[str, str]:
    if isinstance(err, asyncio.TimeoutError):
        return "timeout", f"could not connect within {timeouts.connect_s}s"
    return "connect_error", one_line(err)
