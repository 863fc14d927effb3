"""The aiohttp application: vLLM's OpenAI routes plus ``/sim/stats`` and ``/sim/log``."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
import uuid
from dataclasses import replace
from http import HTTPStatus

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from .._version import __version__
from ..config import SIMULATOR_HEADER
from .clock import TokenClock
from .plan import (
    FAULT_429,
    FAULT_500,
    FAULT_DISCONNECT,
    FAULT_STALL,
    HttpError,
    Plan,
    Responder,
    SimRequest,
    error_body,
    parse_request,
    plan_response,
)
from .state import RequestLogEntry, SimState
from .wire import DONE, ChunkEncoder, encode_pieces, full_response, models_body, plan_logprobs

_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"
_FAULT_STATUS = {FAULT_500: (HTTPStatus.INTERNAL_SERVER_ERROR, "InternalServerError",
                             "simulated internal server error"),
                 FAULT_429: (HTTPStatus.TOO_MANY_REQUESTS, "TooManyRequestsError",
                             "simulated rate limit: too many requests")}


def build_app(state: SimState, responder: Responder | None = None,
              api_key: str | None = None) -> web.Application:
    """The simulator's routes; with ``api_key``, ``/v1/*`` needs ``Authorization: Bearer``."""
    middlewares = [_auth_middleware(api_key)] if api_key else []
    app = web.Application(middlewares=middlewares)
    handlers = _Handlers(state, responder)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_get("/sim/stats", handlers.stats)
    app.router.add_get("/sim/log", handlers.log)
    app.on_response_prepare.append(_echo_request_id)
    app.on_response_prepare.append(_announce)
    if state.profile.connection_close:
        app.on_response_prepare.append(_connection_close)
    return app


async def _connection_close(request: web.Request, response: web.StreamResponse) -> None:
    if request.path.startswith("/v1/") and request.method == "POST":
        # Headers are already prepared when this hook runs: set the header ourselves too.
        response.force_close()
        response.headers["Connection"] = "close"


async def _announce(request: web.Request, response: web.StreamResponse) -> None:
    """Every response says it comes from the simulator (clients record ``simulated: true``)."""
    response.headers[SIMULATOR_HEADER] = __version__


async def _echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """Like vLLM: echo the client's X-Request-Id, or make one up (generation routes set it)."""
    if "X-Request-Id" not in response.headers:
        response.headers["X-Request-Id"] = request.headers.get("X-Request-Id") or uuid.uuid4().hex


def _auth_middleware(api_key: str):
    # Compare digests in constant time, as vLLM does; the key itself is never logged.
    expected = hashlib.sha256(api_key.encode()).digest()

    @web.middleware
    async def auth(request: web.Request, handler):
        if request.path.startswith("/v1"):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            given = hashlib.sha256(token.encode()).digest()
            if scheme.lower() != "bearer" or not hmac.compare_digest(given, expected):
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return auth


def _error_response(entry: RequestLogEntry, status: int, message: str, err_type: str,
                    param: str | None = None) -> web.Response:
    entry.status = status
    return web.Response(status=status, body=error_body(status, message, err_type, param),
                        content_type=_JSON, headers={"X-Request-Id": entry.request_id})


class _Handlers:
    def __init__(self, state: SimState, responder: Responder | None) -> None:
        self.state = state
        self.profile = state.profile
        self.responder = responder
        self.created = int(time.time())

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        self.state.reads[request.path] += 1
        return web.Response(body=self.state.metrics_text(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def models(self, request: web.Request) -> web.Response:
        self.state.reads[request.path] += 1
        body = models_body(self.profile.model, self.created, self.profile.max_model_len)
        return web.Response(body=body, content_type=_JSON)

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.state.statistics())

    async def log(self, request: web.Request) -> web.Response:
        return web.json_response(self.state.log_entries())

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        entry = RequestLogEntry(request.headers.get("X-Request-Id") or uuid.uuid4().hex,
                                time.perf_counter_ns())
        number = self.state.next_request_number()
        try:
            try:
                req = parse_request(await request.read(), api, self.profile)
                if self.profile.prefix_caching:
                    req = replace(req, cached_tokens=self.state.prefix_cache.match(
                        req.prompt_full, req.prompt_tokens))
                    self.state.prefix_queries += req.prompt_tokens
                    self.state.prefix_hits += req.cached_tokens or 0
                plan = self._plan(req, number)
            except HttpError as err:
                return _error_response(entry, err.status, err.message, err.err_type, err.param)
            entry.fault = plan.fault
            if plan.fault in _FAULT_STATUS:
                status, err_type, message = _FAULT_STATUS[plan.fault]
                return _error_response(entry, status, message, err_type)
            if req.stream:
                return await _Stream(self.state, request, req, plan, entry).run()
            return await self._full(request, req, plan, entry)
        finally:
            self.state.finish(entry)

    def _plan(self, req: SimRequest, number: int) -> Plan:
        try:
            return plan_response(req, self.profile, self.responder, number)
        except Exception as exc:  # the user's responder failed: a server error, not a crash
            raise HttpError(HTTPStatus.INTERNAL_SERVER_ERROR,
                            f"responder failed: {type(exc).__name__}: {exc}"[:300],
                            "InternalServerError") from None

    async def _full(self, request: web.Request, req: SimRequest, plan: Plan,
                    entry: RequestLogEntry) -> web.StreamResponse:
        """Non-streamed: generate on the same clock, then send the whole body at once."""
        state = self.state
        async with state.slot(req.prompt_tokens, entry) as ticket:
            clock = TokenClock(state, plan, _first_due(state, req, plan), ticket)
            stall_before = plan.fault_at if plan.fault == FAULT_STALL else -1
            async for start, end in clock.batches(plan.tokens, plan.tokens,
                                                  stall_before=stall_before,
                                                  stall_s=self.profile.stall_s):
                entry.tokens += end - start
        if plan.fault == FAULT_DISCONNECT:
            entry.tokens = 0  # generated, never sent
            _drop_connection(request)
            return web.Response(status=500)  # never reaches the client
        prefix = "chatcmpl-" if req.api == "chat" else "cmpl-"
        body = full_response(req, plan, prefix + entry.request_id, int(time.time()),
                             self.profile.model)
        entry.first_content_write_ns = entry.last_write_ns = time.perf_counter_ns()
        state.tokens_sent += plan.tokens
        state.bytes_sent += len(body)
        state.ttft_histogram.observe((entry.last_write_ns - entry.received_ns) / 1e9)
        state.e2e_histogram.observe((entry.last_write_ns - entry.received_ns) / 1e9)
        return web.Response(body=body, content_type=_JSON,
                            headers={"X-Request-Id": entry.request_id})


def _first_due(state: SimState, req: SimRequest, plan: Plan) -> float:
    """Loop time of the first token: TTFT (with prefill and jitter) after getting a slot."""
    profile = state.profile
    ttft = profile.ttft_for(req.prompt_tokens - (req.cached_tokens or 0))
    if profile.jitter and ttft:
        ttft *= 1.0 + profile.jitter * (2.0 * plan.rng.random() - 1.0)
    return asyncio.get_running_loop().time() + ttft


def _drop_connection(request: web.Request) -> None:
    """Mid-stream disconnect: close the socket after flushing what was written."""
    if request.transport is not None:
        request.transport.close()


class _Stream:
    """One SSE response: role chunk, token chunks, finish, usage, ``[DONE]``."""

    def __init__(self, state: SimState, request: web.Request, req: SimRequest, plan: Plan,
                 entry: RequestLogEntry) -> None:
        self.state, self.request, self.req, self.plan, self.entry = state, request, req, plan, entry
        prefix = "chatcmpl-" if req.api == "chat" else "cmpl-"
        model = state.profile.model
        self.encoder = ChunkEncoder(req, prefix + entry.request_id, int(time.time()), model,
                                    plan_logprobs(req, plan, model))
        self.pieces = encode_pieces(plan)

    async def run(self) -> web.StreamResponse:
        # Headers go out at once, before queueing, as uvicorn does for vLLM.
        response = web.StreamResponse(headers={"Content-Type": _SSE,
                                               "X-Request-Id": self.entry.request_id})
        await response.prepare(self.request)
        plan, state = self.plan, self.state
        disconnect_at = plan.fault_at if plan.fault == FAULT_DISCONNECT else -1
        try:
            async with state.slot(self.req.prompt_tokens, self.entry) as ticket:
                clock = TokenClock(state, plan, _first_due(state, self.req, plan), ticket)
                if disconnect_at == 0:
                    _drop_connection(self.request)
                    return response
                batches = clock.batches(
                    plan.tokens, state.profile.events_per_write, cut=disconnect_at,
                    stall_before=plan.fault_at if plan.fault == FAULT_STALL else -1,
                    stall_s=state.profile.stall_s)
                async for start, end in batches:
                    await self._send(response, start, end)
                    if end == disconnect_at:
                        _drop_connection(self.request)
                        return response
            await response.write_eof()
            if state.profile.close_after_response:
                _drop_connection(self.request)  # llama.cpp: no header, just a closed socket
        except ConnectionResetError:  # the client went away; aiohttp's error subclasses this
            self.entry.status = 499  # nginx's "client closed request"
        return response

    def _payload(self, start: int, end: int) -> bytes:
        encoder, plan = self.encoder, self.plan
        last = plan.tokens - 1
        payload = encoder.tokens(self.pieces, start, min(end, last)) if start < last else b""
        if start == 0:
            payload = encoder.role_chunk() + payload
        if end == plan.tokens:
            payload += encoder.last_token(self.pieces[last], plan.tokens, plan.finish_reason)
            if self.req.include_usage:
                payload += encoder.usage_chunk(plan.tokens)
            payload += DONE
        return payload

    async def _send(self, response: web.StreamResponse, start: int, end: int) -> None:
        payload = self._payload(start, end)
        entry, state = self.entry, self.state
        now_ns = time.perf_counter_ns()  # just before the bytes are handed to the socket
        if start == 0:
            entry.first_content_write_ns = now_ns
            state.ttft_histogram.observe((now_ns - entry.received_ns) / 1e9)
        await response.write(payload)
        count = end - start
        entry.tokens += count
        if start and entry.last_write_ns:  # once per batch: its gap per token it carried
            state.itl_histogram.observe((now_ns - entry.last_write_ns) / 1e9 / count)
        entry.last_write_ns = now_ns
        state.tokens_sent += count
        state.bytes_sent += len(payload)
        if end == self.plan.tokens:
            state.e2e_histogram.observe((now_ns - entry.received_ns) / 1e9)
            if end > 1:
                state.tpot_histogram.observe((now_ns - entry.first_content_write_ns) / 1e9
                                             / (end - 1))
