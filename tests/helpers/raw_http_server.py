"""A scripted HTTP/1.1 server on 127.0.0.1 that writes exactly the bytes a test gives it.

Real servers are not polite: they split responses anywhere, use LF or CRLF, chunk bodies
mid-event, close connections after a response or mid-body. This server answers
``GET /v1/models`` properly (so targets pass their preflight) and every ``POST`` with the
next scripted :class:`Script`: its pieces written one socket write each, with a short pause
between them so the client sees them as separate reads.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import orjson

MODELS = orjson.dumps({"object": "list", "data": [{"id": "raw-model", "object": "model"}]})


@dataclass(frozen=True)
class Script:
    pieces: tuple[bytes, ...]  # the response, head included, as separate writes
    close: bool = False  # close the connection after the last piece
    pause_s: float = 0.002


def chunked(body_pieces: list[bytes]) -> bytes:
    """``Transfer-Encoding: chunked`` framing of ``body_pieces`` (one HTTP chunk each)."""
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in body_pieces if p)
    return out + b"0\r\n\r\n"


def sse_head(framing: str) -> bytes:
    """Response head for an SSE body framed by ``chunked``, ``length:<n>`` or ``eof``."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if framing == "chunked":
        head += b"Transfer-Encoding: chunked\r\n"
    elif framing.startswith("length:"):
        head += b"Content-Length: %d\r\n" % int(framing[7:])
    else:
        head += b"Connection: close\r\n"
    return head + b"\r\n"


class RawServer:
    """``with RawServer() as server: server.script(...); url = server.url``.
    ``models_reply``: the whole answer to ``GET /v1/models`` (default: one model, 200)."""

    def __init__(self, ssl_context=None, models_reply: bytes | None = None) -> None:
        self._ssl = ssl_context
        self._models_reply = models_reply
        self._scripts: list[Script] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.url = ""
        self.posts = 0
        self._handlers: set[asyncio.Task] = set()

    def script(self, *scripts: Script) -> None:
        self._scripts.extend(scripts)

    def __enter__(self) -> RawServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl), self._loop)
        self._server = future.result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self._ssl else 'http'}://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in self._handlers:
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                if head.startswith(b"GET /v1/models"):
                    writer.write(self._models_reply or
                                 b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(MODELS), MODELS))
                    await writer.drain()
                    continue
                self.posts += 1
                script = self._scripts.pop(0)
                for piece in script.pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(script.pause_s)
                if script.close:
                    break
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError,
                asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._handlers.discard(task)
