"""The one way targets build their aiohttp session: a keep-alive pool sized to the load."""

from __future__ import annotations

import aiohttp

from ..config import Timeouts


def client_session(timeouts: Timeouts, pool_size: int,
                   headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    """``pool_size`` connections (0 = unlimited), kept alive between requests.

    ``sock_read`` is the idle timeout: the longest gap allowed between two reads of a body.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=pool_size, limit_per_host=pool_size,
                                       keepalive_timeout=60),
        timeout=aiohttp.ClientTimeout(total=timeouts.total_s, sock_connect=timeouts.connect_s,
                                      sock_read=timeouts.idle_s),
        headers=headers, auto_decompress=False)
