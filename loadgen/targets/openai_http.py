"""OpenAI-compatible HTTP target (vLLM first): ``/v1/chat/completions`` or ``/v1/completions``.

Two transports, chosen by ``RequestOptions.transport``:

- ``stream`` (default): :mod:`.http_pool`, one ``asyncio.Protocol`` per connection; each
  socket read is timestamped once in ``data_received`` and parsed right there; the request's
  task wakes once, at the end. Request heads are built once per run (:mod:`loadgen.codecs.http1`).
- ``aiohttp``: one aiohttp ``ClientSession``; one timestamp per ``iter_any`` read.

Both feed the same :class:`~loadgen.codecs.openai_response.OpenAIResponse`, so they give the same records
for the same bytes. aiohttp also does the preflight (``GET /v1/models``), where its
exceptions are mapped, at this one boundary, into one-line :mod:`loadgen.errors`.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import aiohttp
import orjson

from ..codecs.http1 import RequestHead
from ..codecs.openai_request import openai_body
from ..codecs.openai_response import OpenAIResponse, error_message
from ..config import APIS, SIMULATOR_HEADER, SIMULATOR_OWNER, TRANSPORTS, RequestOptions
from ..errors import AuthError, ConfigError, TargetError, one_line
from ..record import Prompt, RequestRecord
from ..redact import redact_values
from .base import PreparedRequest, Successor
from .http_pool import HTTPPool
from .session import AiohttpTransport, ChainedSend, Connections, headers_too_large

_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
PREFLIGHT_MAX_S = 30.0  # the preflight's longest wait, however long --timeout is
_PREFLIGHT_BODY_LIMIT = 16 * 1024 * 1024  # a model list, not a download


async def _read_limited(resp: aiohttp.ClientResponse, url: str) -> bytes:
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size > _PREFLIGHT_BODY_LIMIT:
            raise TargetError(f"GET {url} answered more than {_PREFLIGHT_BODY_LIMIT >> 20} MB; "
                              "is --target an OpenAI-compatible server?")
    return b"".join(chunks)


def _response_problem(exc: aiohttp.ClientResponseError) -> str:
    """What was wrong with a response aiohttp could not read (headers too large...)."""
    text = one_line(exc.message or exc, 160)
    if headers_too_large(exc):
        return f"the response headers are too large ({text}); is --target the right server?"
    return f"not a valid HTTP response ({text})"

__all__ = ["OpenAIHTTPTarget", "base_url", "error_message"]


def base_url(url: str) -> str:
    """Normalise ``http://host:port[/v1[/...]]`` to ``http://host:port`` + any prefix before /v1."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--target {url!r} is not a URL like http://127.0.0.1:8000 "
                          "or sagemaker://ENDPOINT_NAME")
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/models"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


class OpenAIHTTPTarget:
    def __init__(self, url: str, options: RequestOptions = RequestOptions(),
                 pool_size: int = 100) -> None:
        if options.api not in APIS:
            raise ConfigError(f"--api must be one of {', '.join(APIS)} (got {options.api!r})")
        if options.transport not in TRANSPORTS:
            raise ConfigError(f"--transport must be one of {', '.join(TRANSPORTS)} "
                              f"(got {options.transport!r})")
        self.base = base_url(url)
        self.options = options
        self.model = options.model
        self.pool_size = pool_size
        self._endpoint = self.base + _PATHS[options.api]
        self._connections = Connections()
        # The preflight's answer said it is loadgen's simulator (its header or model owner).
        self.simulator = False
        self._head: RequestHead | None = None
        self._api_key = os.environ.get(options.api_key_env) or None
        self.warnings: list[str] = []  # the preflight's, for the run to print and record

    def describe(self) -> dict[str, Any]:
        info = {"kind": "openai-http", "url": self.base, "api": self.options.api,
                "model": self.model, "stream": self.options.stream,
                "transport": self.options.transport, "ignore_eos": self.options.ignore_eos}
        if self.simulator:
            info["simulator"] = True
        if self.warnings:
            info["warnings"] = list(self.warnings)
        return info

    def statistics(self) -> dict[str, int]:
        """Connection counters (opened, reconnects, closed by the server) since open()."""
        return self._connections.statistics()

    async def open(self) -> None:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._connections.aiohttp = AiohttpTransport(self.options.timeouts, self.pool_size,
                                                     headers)
        try:
            await self._preflight()
            if self.options.transport == "stream":
                self._start_pool(headers)
        except BaseException:
            await self.close()
            raise

    def _start_pool(self, headers: dict[str, str]) -> None:
        if self.options.stream:
            headers = {**headers, "Accept": "text/event-stream"}
        parts = urlsplit(self._endpoint)
        self._head = RequestHead("POST", parts.path, parts.netloc, headers)
        self._connections.pool = HTTPPool.for_url(self._endpoint, self.options.timeouts,
                                                  self.pool_size)

    async def open_connections(self, connections: int) -> None:
        """Open ``connections`` connections now, before a level starts measuring."""
        await self._connections.open_connections(connections)

    async def close(self) -> None:
        await self._connections.close()

    async def _preflight(self) -> None:
        """GET /v1/models: proves the server is up, speaks OpenAI, accepts our key; picks the model.

        It waits at most ``--connect-timeout`` to connect and ``--timeout`` (at most
        :data:`PREFLIGHT_MAX_S`) in all, and says which step ran out. With ``--model`` given,
        a 404 (a gateway that serves no /v1/models) is a warning in :attr:`warnings`."""
        assert self._connections.aiohttp is not None
        url = self.base + "/v1/models"
        timeouts = self.options.timeouts
        total = min(timeouts.total_s, PREFLIGHT_MAX_S)
        limit = aiohttp.ClientTimeout(total=total, sock_connect=timeouts.connect_s)
        try:
            async with self._connections.aiohttp.session.get(url, timeout=limit,
                                                             allow_redirects=False) as resp:
                body = await _read_limited(resp, url)
                status = resp.status
                self.simulator = SIMULATOR_HEADER in resp.headers
                location = resp.headers.get("Location")
        except aiohttp.ConnectionTimeoutError:
            raise TargetError(f"connecting to {self.base} timed out after {timeouts.connect_s:g} s "
                              "(--connect-timeout); is the server running and is --target "
                              "right?") from None
        except aiohttp.ClientConnectorError as exc:
            raise TargetError(f"cannot connect to {self.base} ({exc.os_error or exc}); "
                              "is the server running and is --target right?") from None
        except asyncio.TimeoutError:
            raise TargetError(f"GET {url} connected but got no answer within {total:g} s "
                              "(--timeout); is --target an OpenAI-compatible server?") from None
        except aiohttp.ClientResponseError as exc:
            raise TargetError(f"GET {url}: {_response_problem(exc)}") from None
        except aiohttp.ClientError as exc:
            raise TargetError(f"{url} did not answer properly ({type(exc).__name__}); "
                              "is --target an OpenAI-compatible server?") from None
        if 300 <= status < 400:  # not followed: the key must not travel to another host
            raise TargetError(f"GET {url} redirects (HTTP {status}) to {location or 'nowhere'}; "
                              "point --target at the server itself")
        if status == 404 and self.model is not None:
            self.warnings.append(f"GET {url} returned HTTP 404 (a gateway without it?); "
                                 f"sending to model {self.model!r} as --model says")
            return
        if status == 401:
            key_env = self.options.api_key_env
            hint = (f"the key in ${key_env} was rejected" if self._api_key
                    else f"set ${key_env} (or name another variable with --api-key-env)"
                    if key_env else "no API key was sent (no api_key_env; an MCP server "
                    "sends one only from a variable allowed with --allow-env)")
            raise AuthError(f"{self.base} requires an API key (HTTP 401): {hint}")
        try:
            cards = orjson.loads(body)["data"] if status == 200 else None
            models = [m["id"] for m in cards] if cards is not None else None
            self.simulator |= any(m.get("owned_by") == SIMULATOR_OWNER for m in cards or ())
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            models = None
        if models is None:
            hint = " (or give --model if it serves none)" if status == 404 else ""
            raise TargetError(f"{self.base} is not an OpenAI-compatible server "
                              f"(GET /v1/models returned HTTP {status}); check --target{hint}")
        if self.model is None:
            if not models:
                raise TargetError(f"{self.base} serves no models (GET /v1/models is empty)")
            self.model = models[0]
        elif self.model not in models:
            raise TargetError(f"model {self.model!r} is not served by {self.base}; "
                              f"it serves: {', '.join(models) or 'nothing'}")

    def prepare(self, prompt: Prompt, record: RequestRecord) -> PreparedRequest:
        """Body and, for the streaming transport, the request's exact bytes (the request id
        is in them); for aiohttp, the body and the id's header."""
        body = orjson.dumps(openai_body(prompt, self.options, self.model))
        if self._head is not None:
            return PreparedRequest(body, self._head.render(body, record.request_id))
        return PreparedRequest(body, headers={"X-Request-Id": str(record.request_id)})

    async def send(self, prompt: Prompt, record: RequestRecord) -> None:
        await self.send_prepared(self.prepare(prompt, record), record)

    async def send_prepared(self, prepared: PreparedRequest, record: RequestRecord,
                            on_sent: Callable[[], None] | None = None) -> None:
        record.start_ns = record.start_ns or time.perf_counter_ns()
        try:
            await self._connections.send(self._endpoint, prepared, record,
                                         self._respond(record), on_sent)
        finally:  # a server may echo the key in its error body: hide it before it is kept
            self._redact(record)

    async def send_chained(self, prepared: PreparedRequest, record: RequestRecord,
                           on_sent: Callable[[], None] | None, successor: Successor,
                           started: Any = None) -> None:
        """``send_prepared`` with the fast path (:mod:`.http_pool`): ``started`` is a
        request the pool already wrote as the stream's previous response ended."""
        if started is None:
            record.start_ns = record.start_ns or time.perf_counter_ns()
        response = started.handler if started is not None else self._respond(record)
        follow = (ChainedSend(successor, on_sent, _wire, self._respond)
                  if self._connections.pool is not None else None)
        try:
            await self._connections.send(self._endpoint, prepared, record, response, on_sent,
                                         follow, started)
        finally:
            self._redact(record)

    def _redact(self, record: RequestRecord) -> None:
        if record.error_message and self._api_key:
            record.error_message = redact_values(record.error_message, (self._api_key,))

    def _respond(self, record: RequestRecord) -> OpenAIResponse:
        return OpenAIResponse(record, self.options.stream, self.options.keep_text)


def _wire(prepared: PreparedRequest) -> bytes | None:
    return prepared.wire
