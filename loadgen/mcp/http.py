"""``loadgen mcp --http``: the streamable-HTTP app, with its Host/Origin checks on for
every bind address and, when given, a bearer token checked on every request.

The SDK turns its DNS-rebinding protection on only when the bind host is exactly
127.0.0.1, localhost or ::1 (``Server.streamable_http_app``); any other bind (127.0.0.2,
a LAN address) would accept any Host and Origin. Here the allowed Host values are
computed from the bind, so a web page's script can't reach the server through a name
it controls, whatever the address.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket

import anyio
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..simulator.runners import is_loopback

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def host_names(host: str) -> list[str]:
    """The names a client may use to reach a server bound to ``host``: the bind itself;
    for a loopback bind, the loopback names too; for a wildcard bind (all interfaces),
    the loopback names and this machine's name and addresses."""
    names = {host} - set(WILDCARDS)
    if is_loopback(host) or host in WILDCARDS:
        names.update(LOOPBACK_NAMES)
    if host in WILDCARDS:
        machine = socket.gethostname()
        names.update({machine, socket.getfqdn()})
        try:
            names.update(info[4][0] for info in socket.getaddrinfo(machine, None))
        except OSError:
            pass
    return sorted(names)


def security_settings(host: str, port: int) -> TransportSecuritySettings:
    """Host/Origin checks: ``NAME:PORT`` (``[V6]:PORT``) for each of :func:`host_names`."""
    hosts = []
    for name in host_names(host):
        shown = f"[{name}]" if _is_v6(name) else name
        hosts.append(f"{shown}:{port}")
        if port == 80:
            hosts.append(shown)
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=hosts, allowed_origins=origins)


def _is_v6(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).version == 6
    except ValueError:
        return False


class BearerToken:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer TOKEN``
    (compared in constant time); otherwise 401 and nothing else runs."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = Headers(scope=scope).get("authorization", "").encode()
            if not hmac.compare_digest(given, self.expected):
                response = Response("this server needs its token: Authorization: Bearer TOKEN",
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, host: str, port: int, token: str | None) -> ASGIApp:
    """The streamable-HTTP app at ``/mcp`` for a server bound to ``host:port``."""
    app = server.streamable_http_app(host=host,
                                     transport_security=security_settings(host, port))
    return BearerToken(app, token) if token else app


def serve_http(server: MCPServer, host: str, port: int, token: str | None) -> None:
    import uvicorn  # a dependency of the SDK's HTTP transport

    config = uvicorn.Config(http_app(server, host, port, token), host=host, port=port,
                            log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
