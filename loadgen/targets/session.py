"""How a target reaches its server: the aiohttp session (built one way, a keep-alive pool
sized to the load) and :class:`Connections`, which holds it and/or the streaming pool."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import aiohttp

from ..config import Timeouts
from ..errors import one_line
from ..codecs.http1 import ResponseHandler
from ..record import RequestRecord
from .base import PreparedRequest, Successor
from .http_pool import FollowUp, HTTPPool, InFlight


def client_session(timeouts: Timeouts, pool_size: int,
                   headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    """``pool_size`` connections (0 = unlimited), kept alive between requests.

    ``sock_read`` is the idle timeout: the longest gap allowed between two reads of a body.
    A request made with ``trace_request_ctx=record`` gets ``record.sent_ns`` set when its
    body has been written.
    """
    return aiohttp.ClientSession(
        trace_configs=[_SENT_TRACE],
        connector=aiohttp.TCPConnector(limit=pool_size, limit_per_host=pool_size,
                                       keepalive_timeout=60),
        timeout=aiohttp.ClientTimeout(total=timeouts.total_s, sock_connect=timeouts.connect_s,
                                      sock_read=timeouts.idle_s),
        headers=headers, auto_decompress=False)


async def _on_body_sent(session, context, params) -> None:
    record = context.trace_request_ctx
    if record is not None:
        record.sent_ns = time.perf_counter_ns()


_SENT_TRACE = aiohttp.TraceConfig()
_SENT_TRACE.on_request_chunk_sent.append(_on_body_sent)


def headers_too_large(err: aiohttp.ClientResponseError) -> bool:
    """Whether aiohttp refused a response for a header line over its limit (8190 bytes:
    ``LineTooLong``, "Got more than 8190 bytes when reading ...")."""
    text = str(err.message).lower()
    return "got more than" in text or "too long" in text


def transport_failure(err: BaseException, timeouts: Timeouts) -> tuple[str, str]:
    """An aiohttp/timeout exception during a request -> (error type, one-line message).

    The same names on every target: ``timeout``, ``connect_error``, ``disconnected``.
    """
    # Order matters: aiohttp's timeout errors are also ClientErrors.
    if isinstance(err, asyncio.TimeoutError):
        return "timeout", (f"no data within the timeouts (connect {timeouts.connect_s}s, "
                           f"idle {timeouts.idle_s}s, total {timeouts.total_s}s)")
    if isinstance(err, aiohttp.ClientConnectorError):
        return "connect_error", one_line(err.os_error or err)
    if isinstance(err, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return "disconnected", one_line(f"{type(err).__name__}: {err}")
    if isinstance(err, aiohttp.ClientResponseError) and headers_too_large(err):
        return "bad_response", one_line(f"response headers too large: {err.message}", 200)
    return type(err).__name__, one_line(err)


class AiohttpTransport:
    """aiohttp behind the same contract as :class:`.http_pool.HTTPPool`: a request's response
    goes to a ``ResponseHandler``; failures are recorded through it, never raised.

    A request that fails before any response byte because its pooled connection was closed
    under it is retried once on a fresh connection (a second session that never reuses one)
    and counted in ``reconnects``.
    """

    def __init__(self, timeouts: Timeouts, pool_size: int,
                 headers: dict[str, str] | None = None) -> None:
        self.timeouts = timeouts
        self.session = client_session(timeouts, pool_size, headers)
        self._headers = headers
        self._fresh: aiohttp.ClientSession | None = None
        self.reconnects = 0

    def statistics(self) -> dict[str, int]:
        return {"reconnects": self.reconnects}

    async def close(self) -> None:
        await self.session.close()
        if self._fresh is not None:
            await self._fresh.close()

    def _fresh_session(self) -> aiohttp.ClientSession:
        if self._fresh is None:
            self._fresh = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=self.session.timeout, headers=self._headers, auto_decompress=False,
                trace_configs=[_SENT_TRACE])
        return self._fresh

    async def request(self, url: str, body: bytes, headers: dict[str, str], record,
                      response) -> None:
        clock = time.perf_counter_ns
        session = self.session
        for attempt in (0, 1):
            try:
                async with session.post(url, data=body, headers=headers, allow_redirects=False,
                                        trace_request_ctx=record) as http_response:
                    response.on_headers(http_response.status, http_response.headers, clock())
                    async for chunk in http_response.content.iter_any():
                        response.on_body(chunk, clock())  # timestamp first, then parse
                    response.on_complete(clock())
                    return
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
                if response.status == 0 and attempt == 0:
                    self.reconnects += 1
                    session = self._fresh_session()
                    continue
                response.on_failure(*transport_failure(err, self.timeouts), clock())
                return
            except (asyncio.TimeoutError, aiohttp.ClientError) as err:
                response.on_failure(*transport_failure(err, self.timeouts), clock())
                return
            except asyncio.CancelledError:
                response.cut_short(clock())
                raise


class Connections:
    """A target's connections: the streaming pool (``transport="stream"``,
    :class:`~.http_pool.HTTPPool`) or an aiohttp session (:class:`AiohttpTransport`), or
    both (the OpenAI target's preflight uses aiohttp). Requests take the pool when there is
    one; ``open_connections``, ``statistics`` and ``close`` mean the same for every target.
    """

    def __init__(self) -> None:
        self.pool: HTTPPool | None = None
        self.aiohttp: AiohttpTransport | None = None

    async def open_connections(self, count: int) -> None:
        """Open ``count`` pool connections now, before a level starts measuring (aiohttp
        connects on demand)."""
        if self.pool is not None:
            await self.pool.open_connections(count)

    def statistics(self) -> dict[str, int]:
        """Connection counters (opened, reconnects, closed by the server) since open."""
        if self.pool is not None:
            return self.pool.statistics()
        return self.aiohttp.statistics() if self.aiohttp is not None else {}

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        session, self.aiohttp = self.aiohttp, None
        if pool is not None:
            await pool.close()
        if session is not None:
            await session.close()

    async def send(self, url: str, prepared: PreparedRequest, record, response,
                   on_sent: Callable[[], None] | None = None,
                   follow: ChainedSend | None = None, started: InFlight | None = None) -> None:
        """One request: its prebuilt bytes on the pool, else its body and headers (with the
        session's own) through aiohttp. ``response`` fills ``record``; nothing raises.
        ``follow``, ``started``: the pool's fast path (:class:`ChainedSend`)."""
        if self.pool is not None:
            assert prepared.wire is not None
            await send_on_pool(self.pool, prepared.wire, record, response, on_sent, follow,
                               started)
        else:
            assert self.aiohttp is not None, "open() the target first"
            await self.aiohttp.request(url, prepared.body, prepared.headers or {}, record,
                                       response)


class ChainedSend:
    """The pool's :class:`~.http_pool.FollowUp` for one closed-loop stream of a target: when
    a response ends in ``data_received``, the engine's :class:`~.base.Successor` hands over
    the stream's next request (already built), ``wire`` gives its bytes (None: the task sends
    it) and ``respond`` the target's handler for its response."""

    __slots__ = ("successor", "on_sent", "wire", "respond", "_record")

    def __init__(self, successor: Successor, on_sent: Callable[[], None] | None,
                 wire: Callable[[PreparedRequest], bytes | None],
                 respond: Callable[[RequestRecord], ResponseHandler]) -> None:
        self.successor = successor
        self.on_sent = on_sent
        self.wire = wire
        self.respond = respond
        self._record: RequestRecord | None = None

    def next_request(self, end_ns: int) -> tuple[bytes, ResponseHandler] | None:
        prepared = self.successor.peek()
        data = self.wire(prepared) if prepared is not None else None
        if data is None:
            return None
        record = self._record = self.successor.claim(end_ns)
        record.start_ns = end_ns
        return data, self.respond(record)

    def sent(self, in_flight: Any, sent_ns: int) -> None:
        assert self._record is not None
        self._record.sent_ns = sent_ns
        self._record = None
        self.successor.started(in_flight)
        if self.on_sent is not None:
            self.on_sent()


async def send_on_pool(pool: HTTPPool, data: bytes, record, response,
                       on_sent: Callable[[], None] | None = None,
                       follow: FollowUp | None = None,
                       started: InFlight | None = None) -> None:
    """Send ``data`` for ``record``; the target's ``response`` handler fills the record.
    ``record.sent_ns`` is set when the bytes were written, then ``on_sent()`` runs.
    ``follow``, ``started``: the fast path (:meth:`HTTPPool.request`)."""

    def sent(now_ns: int) -> None:
        record.sent_ns = now_ns
        if on_sent is not None:
            on_sent()

    try:
        await pool.request(data, response, sent, follow, started)
    except asyncio.CancelledError:
        response.cut_short(time.perf_counter_ns())
        raise
