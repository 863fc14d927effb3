"""The physical-limit reference: a minimal closed-loop streaming client, no framework at all.

One ``asyncio.Protocol`` per stream; the request bytes are built once (only the request id
changes); in ``data_received`` it takes one timestamp, notes the first read carrying a token
and, when the response's last chunk arrives, sends the next request right there. It parses
nothing it does not need, so it shows what a Python client on this machine can do at best.
It only understands the shape that ``reference_server.py`` sends.
"""

from __future__ import annotations

import asyncio
import time

import orjson

_TOKEN_MARK = b'{"content":"'  # token events; the role chunk has "role" first
_END = b"0\r\n\r\n"


class RawStream(asyncio.Protocol):
    def __init__(self, client: "RawClient") -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.request_id = 0
        self.intended_ns = 0
        self.first_ns = 0
        self.reads: list[int] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send_next(self, intended_ns: int) -> None:
        request_id = self.client.next_id()
        if request_id is None:
            self.client.stream_done()
            return
        self.request_id, self.intended_ns, self.first_ns = request_id, intended_ns, 0
        self.reads = []
        self.transport.write(self.client.head % (request_id,) + self.client.body)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        if _TOKEN_MARK in data:
            if not self.first_ns:
                self.first_ns = now
            self.reads.append(now)
        if data.endswith(_END):
            self.client.results.append((self.request_id, self.intended_ns, self.first_ns,
                                        self.reads))
            self.send_next(now)  # closed loop: the next request is due now


class RawClient:
    def __init__(self, host: str, port: int, concurrency: int, requests: int,
                 max_tokens: int, first_id: int = 1) -> None:
        self.host, self.port = host, port
        self.concurrency, self.requests = concurrency, requests
        body = orjson.dumps({"model": "reference", "max_tokens": max_tokens, "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]})
        self.body = body
        self.head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                     % (host.encode(), port, len(body))) + b"X-Request-Id: %d\r\n\r\n"
        self._next = first_id
        self._last = first_id + requests
        self.results: list[tuple[int, int, int, list[int]]] = []
        self._running = 0
        self._done = asyncio.Event()

    def next_id(self) -> int | None:
        if self._next >= self._last:
            return None
        self._next += 1
        return self._next - 1

    def stream_done(self) -> None:
        self._running -= 1
        if self._running == 0:
            self._done.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        streams = []
        for _ in range(self.concurrency):  # connect first: setup is not part of any TTFT
            _, stream = await loop.create_connection(lambda: RawStream(self), self.host,
                                                     self.port)
            streams.append(stream)
        self._running = len(streams)
        t0 = time.perf_counter_ns()
        for stream in streams:
            stream.send_next(t0)
        await self._done.wait()
        for stream in streams:
            stream.transport.close()
