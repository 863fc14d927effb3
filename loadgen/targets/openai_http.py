"""OpenAI-compatible HTTP target (vLLM first): ``/v1/chat/completions`` or ``/v1/completions``.

One aiohttp ``ClientSession`` per run with a keep-alive pool sized to the load.
The per-chunk path is: one ``perf_counter_ns()`` per socket read
(``iter_any``), then the pure :class:`~loadgen.streams.OpenAIStreamParser`.
aiohttp exceptions are mapped here, at this one boundary: before the run (the
preflight in :meth:`OpenAIHTTPTarget.open`) into one-line :mod:`loadgen.errors`;
during the run into error types on the request's record.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from ..config import APIS, RequestOptions, openai_body
from ..errors import AuthError, ConfigError, TargetError, one_line
from ..record import Prompt, RequestRecord
from ..streams import OpenAIStreamParser, parse_openai_body
from .session import client_session, transport_failure

_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


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


def error_message(body: bytes) -> str:
    """The ``message`` of an OpenAI/vLLM error body, else the body's start."""
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = err.get("message") if isinstance(err, dict) else err
        return one_line(msg or obj)
    except (orjson.JSONDecodeError, AttributeError):
        return one_line(body[:200].decode("utf-8", "replace"))


class OpenAIHTTPTarget:
    def __init__(self, url: str, options: RequestOptions = RequestOptions(),
                 pool_size: int = 100) -> None:
        if options.api not in APIS:
            raise ConfigError(f"--api must be one of {', '.join(APIS)} (got {options.api!r})")
        self.base = base_url(url)
        self.options = options
        self.model = options.model
        self.pool_size = pool_size
        self._endpoint = self.base + _PATHS[options.api]
        self._session: aiohttp.ClientSession | None = None
        self._api_key = os.environ.get(options.api_key_env) or None

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai-http", "url": self.base, "api": self.options.api,
                "model": self.model, "stream": self.options.stream}

    async def open(self) -> None:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._session = client_session(self.options.timeouts, self.pool_size, headers)
        try:
            await self._preflight()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _preflight(self) -> None:
        """GET /v1/models: proves the server is up, speaks OpenAI, accepts our key; picks the model."""
        assert self._session is not None
        url = self.base + "/v1/models"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                body = await resp.read()
                status = resp.status
        except aiohttp.ClientConnectorError as exc:
            raise TargetError(f"cannot connect to {self.base} ({exc.os_error or exc}); "
                              "is the server running and is --target right?") from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise TargetError(f"{url} did not answer properly ({type(exc).__name__}); "
                              "is --target an OpenAI-compatible server?") from None
        if status == 401:
            hint = ("the key in ${} was rejected".format(self.options.api_key_env) if self._api_key
                    else "set ${} (or name another variable with --api-key-env)".format(
                        self.options.api_key_env))
            raise AuthError(f"{self.base} requires an API key (HTTP 401): {hint}")
        try:
            models = [m["id"] for m in orjson.loads(body)["data"]] if status == 200 else None
        except (orjson.JSONDecodeError, KeyError, TypeError):
            models = None
        if models is None:
            raise TargetError(f"{self.base} is not an OpenAI-compatible server "
                              f"(GET /v1/models returned HTTP {status}); check --target")
        if self.model is None:
            if not models:
                raise TargetError(f"{self.base} serves no models (GET /v1/models is empty)")
            self.model = models[0]
        elif self.model not in models:
            raise TargetError(f"model {self.model!r} is not served by {self.base}; "
                              f"it serves: {', '.join(models) or 'nothing'}")

    async def send(self, prompt: Prompt, record: RequestRecord) -> None:
        assert self._session is not None, "open() the target first"
        body = orjson.dumps(openai_body(prompt, self.options, self.model))
        keep_text = self.options.keep_text
        clock = time.perf_counter_ns
        record.start_ns = record.start_ns or clock()
        parser: OpenAIStreamParser | None = None
        cut_short = True
        try:
            async with self._session.post(self._endpoint, data=body,
                                          headers={"X-Request-Id": str(record.request_id)}) as resp:
                if resp.status != 200:
                    detail = error_message(await resp.read())
                    record.fail(f"http_{resp.status}", detail, clock())
                    return
                if not self.options.stream:
                    parse_openai_body(record, await resp.read(), clock(), keep_text)
                    return
                parser = OpenAIStreamParser(record, keep_text)
                feed = parser.feed
                async for chunk in resp.content.iter_any():
                    feed(chunk, clock())
                cut_short = False
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            record.fail(*transport_failure(exc, self.options.timeouts), clock())
        finally:
            # Also on failure or cancellation: tokens and text that arrived are kept.
            if parser is not None:
                parser.close(clock(), cut_short)
