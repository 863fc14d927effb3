"""The one way targets build their aiohttp session: a keep-alive pool sized to the load."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from ..config import Timeouts
from ..errors import one_line


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
    return type(err).__name__, one_line(err)
