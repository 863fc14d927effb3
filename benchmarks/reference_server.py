"""A lean streaming server that knows when it read each request and wrote each token.

    python benchmarks/reference_server.py --port 0 --ttft-ms 50 --itl-ms 10

It exists to score clients: the TTFT error a user suffers is
``(client: intended send -> first token seen) - (server: request read -> first token written)``
for the same request (matched by ``X-Request-Id``). Both clocks are CLOCK_MONOTONIC
(``time.perf_counter_ns``), shared by every process on the machine.

Unlike the built-in simulator (aiohttp, one task per stream), it timestamps the request in
``data_received``, the moment the last byte of the request was read, and drives every stream
from one scheduler (a heap of due times, like a batching server's step loop), so it stays
cheap at 1,000+ streams. ``GET /log`` returns, per request: id, read_ns, every write time.
Every response is vLLM-shaped chat SSE (role chunk, one event per token, usage, ``[DONE]``).
With ``--sagemaker`` each write is wrapped in an AWS event-stream PayloadPart frame, as
InvokeEndpointWithResponseStream sends the AWS vLLM container's stream (signatures are not
checked: this server scores timing, ``loadgen/simulator/sagemaker_server.py`` checks the protocol).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import re
import sys
import time

import httptools
import orjson

_HORIZON_NS = 1_000_000
_PROMPT_NUMBER = re.compile(rb"request (\d+):")
_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n")
_SAGEMAKER_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\n"
                   b"X-Amzn-SageMaker-Content-Type: text/event-stream\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ROLE = _event({"object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                            "finish_reason": None}]})
TOKEN = _event({"object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]})


def _identity(payload: bytes) -> bytes:
    return payload


def _tail(tokens: int, wrap=_identity) -> bytes:
    last = _event({"object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"content": " end"},
                                "finish_reason": "length"}]})
    usage = _event({"object": "chat.completion.chunk", "choices": [],
                    "usage": {"prompt_tokens": 8, "completion_tokens": tokens,
                              "total_tokens": tokens + 8}})
    return _chunk(wrap(last + usage + b"data: [DONE]\n\n")) + b"0\r\n\r\n"


class Stream:
    __slots__ = ("conn", "request_id", "read_ns", "tokens", "sent", "writes")

    def __init__(self, conn: "Connection", request_id: str, read_ns: int, tokens: int) -> None:
        self.conn, self.request_id, self.read_ns = conn, request_id, read_ns
        self.tokens, self.sent = tokens, 0
        self.writes: list[int] = []


class Server:
    def __init__(self, ttft_ns: int, itl_ns: int, sagemaker: bool = False) -> None:
        self.ttft_ns, self.itl_ns = ttft_ns, itl_ns
        self.head, self.wrap = _HEAD, _identity
        if sagemaker:
            from loadgen.simulator.sagemaker_server import (
                payload_part,  # the SageMaker test server's encoder
            )

            self.head, self.wrap = _SAGEMAKER_HEAD, payload_part
        # Every write but the last is one of two byte strings: framed once, not per write
        # (framing a write per stream per step made the SageMaker server read requests
        # tens of ms late at 256 streams, which the score charged to the client).
        self.first_chunk = _chunk(self.wrap(ROLE + TOKEN))
        self.token_chunk = _chunk(self.wrap(TOKEN))
        self.tails: dict[int, bytes] = {}
        self.due: list[tuple[int, int, Stream]] = []  # (due_ns, seq, stream)
        self.seq = 0
        self.log: list[dict] = []
        self.wake = asyncio.Event()

    def start_stream(self, stream: Stream) -> None:
        stream.conn.transport.write(self.head)
        self._schedule(stream, stream.read_ns + self.ttft_ns)

    def _schedule(self, stream: Stream, due_ns: int) -> None:
        self.seq += 1
        heapq.heappush(self.due, (due_ns, self.seq, stream))
        self.wake.set()

    async def run(self) -> None:
        """The step loop: write every token due within the next millisecond, then sleep until
        the next one is (event-loop timers have millisecond resolution: waking once per due
        time would fall behind at a few hundred streams)."""
        due = self.due
        while True:
            if not due:
                self.wake.clear()
                await self.wake.wait()
                continue
            now = time.perf_counter_ns()
            if due[0][0] > now + _HORIZON_NS:
                await asyncio.sleep((due[0][0] - now) / 1e9)
                continue
            horizon = now + _HORIZON_NS
            while due and due[0][0] <= horizon:
                due_ns, _, stream = heapq.heappop(due)
                self._write_token(stream, due_ns)

    def _write_token(self, stream: Stream, due_ns: int) -> None:
        if stream.conn.transport.is_closing():
            return
        first = stream.sent == 0
        stream.sent += 1
        last = stream.sent >= stream.tokens
        if last:
            tail = self.tails.get(stream.tokens)
            if tail is None:
                tail = self.tails[stream.tokens] = _tail(stream.tokens, self.wrap)
            data = _chunk(self.wrap(ROLE)) + tail if first else tail
        else:
            data = self.first_chunk if first else self.token_chunk
        stream.writes.append(time.perf_counter_ns())  # just before the bytes go to the socket
        stream.conn.transport.write(data)
        if last:
            self.log.append({"request_id": stream.request_id, "read_ns": stream.read_ns,
                             "writes": stream.writes})
        else:
            self._schedule(stream, due_ns + self.itl_ns)


def _id_from_prompt(body: bytes) -> str:
    """SageMaker requests carry no X-Request-Id: loadgen's synthetic prompt number i starts
    with "request i:" and goes out as request id i + 1."""
    match = _PROMPT_NUMBER.search(body)
    return str(int(match.group(1)) + 1) if match else ""


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._reset()

    def _reset(self) -> None:
        self.request_id = ""
        self.body: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-request-id":
            self.request_id = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url = self.parser.get_method()
        if url == b"GET":
            self._answer_get()
        else:
            body = b"".join(self.body)
            try:
                tokens = int(orjson.loads(body).get("max_tokens") or 16)
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                tokens = 16
            request_id = self.request_id or _id_from_prompt(body)
            self.server.start_stream(Stream(self, request_id, self.now, max(1, tokens)))
        self._reset()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def _answer_get(self) -> None:
        if self.url.startswith(b"/log"):
            body = orjson.dumps(self.server.log)
            self.server.log = []
        elif self.url.startswith(b"/v1/models"):
            body = orjson.dumps({"object": "list", "data": [{"id": "reference", "object": "model"}]})
        else:
            body = b"{}"
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def serve(port: int, ttft_ms: float, itl_ms: float, sagemaker: bool) -> None:
    server = Server(int(ttft_ms * 1e6), int(itl_ms * 1e6), sagemaker)
    # The instrument must not pause: with botocore imported (--sagemaker) a full collection
    # walked its objects for ~30 ms in the middle of a burst of requests, and the late reads
    # were charged to the client. Nothing here makes cycles; reference counting frees all.
    gc.disable()
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), "127.0.0.1", port,
                                        backlog=4096)
    print(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}", flush=True)
    await server.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--sagemaker", action="store_true",
                        help="wrap the stream in event-stream frames (InvokeEndpointWithResponseStream)")
    args = parser.parse_args()
    try:
        import uvloop
        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        run(serve(args.port, args.ttft_ms, args.itl_ms, args.sagemaker))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
