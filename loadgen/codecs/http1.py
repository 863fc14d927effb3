"""HTTP/1.1 on the wire, without I/O: request heads built once, responses parsed by llhttp.

Like httpx's ``LineDecoder``, everything here is plain sync code that a test can feed
bytes split at any offset:

- :class:`RequestHead` renders the request line and fixed headers once per run; each
  request only adds its ``Content-Length``, ``X-Request-Id`` and body.
- :class:`ResponseReader` drives ``httptools`` (the binding to llhttp, Node's parser, also
  used by uvicorn): status line, headers, chunked or length-delimited bodies. It hands each
  body piece to a :class:`ResponseHandler` with the timestamp of the socket read it came in,
  so de-chunking adds no clock reads and no copies beyond llhttp's own.

The connection that owns the socket is :mod:`loadgen.targets.http_pool`.
"""

from __future__ import annotations

from typing import Protocol

import httptools

from .. import __version__
from ..errors import one_line


class ResponseHandler(Protocol):
    """What a target does with one response. Called from the connection, never blocks."""

    def on_headers(self, status: int, headers: dict[str, str], now_ns: int) -> None: ...

    def on_body(self, data: bytes, now_ns: int) -> None: ...

    def on_complete(self, now_ns: int) -> None:
        """The body ended as HTTP says it should (length reached, last chunk, or EOF-delimited)."""

    def on_failure(self, error_type: str, message: str, now_ns: int) -> None:
        """The exchange failed (connection lost, timeout, cancelled, unparseable bytes)."""


class RequestHead:
    """``POST path HTTP/1.1`` plus the headers every request of a run shares, as bytes."""

    __slots__ = ("_prefix",)

    def __init__(self, method: str, path: str, host: str,
                 headers: dict[str, str] | None = None) -> None:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}",
                 f"User-Agent: loadgen/{__version__}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError("HTTP header values must not contain line breaks")
        self._prefix = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    def render(self, body: bytes, request_id: int | None = None,
               extra: bytes = b"") -> bytes:
        """The whole request: head, per-request headers (``extra`` is pre-encoded
        ``Name: value\\r\\n`` lines), blank line, body."""
        if request_id is None:
            return b"%s%d\r\n%s\r\n%s" % (self._prefix, len(body), extra, body)
        return b"%s%d\r\nX-Request-Id: %d\r\n%s\r\n%s" % (self._prefix, len(body), request_id,
                                                         extra, body)


MAX_HEAD_BYTES = 64 * 1024  # a status line and headers larger than this are not a response


class ResponseReader:
    """Parses the responses arriving on one connection, one after another (keep-alive).

    Call :meth:`begin` with the handler of the next response before its bytes arrive, then
    :meth:`feed` every socket read. ``complete`` turns true when the response has ended;
    ``keep_alive`` then says whether the server allows another request on the connection.
    """

    __slots__ = ("_parser", "_handler", "_now_ns", "_headers", "status", "headers_done",
                 "complete", "keep_alive", "bytes_in", "_eof_delimited")

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._handler: ResponseHandler | None = None
        self._now_ns = 0
        self._headers: dict[str, str] = {}
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.keep_alive = True
        self.bytes_in = 0  # bytes of the current response seen so far
        self._eof_delimited = False

    def begin(self, handler: ResponseHandler) -> None:
        self._handler = handler
        self._headers = {}
        self.status = 0
        self.headers_done = self.complete = False
        self.bytes_in = 0
        self._eof_delimited = False

    def feed(self, data: bytes, now_ns: int) -> None:
        """One socket read. Raises :class:`ProtocolError` for bytes that are not HTTP."""
        self._now_ns = now_ns
        self.bytes_in += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as err:
            raise ProtocolError(f"malformed HTTP response: {one_line(err)}") from None
        except httptools.HttpParserUpgrade:
            raise ProtocolError("the server switched protocols (HTTP upgrade)") from None
        if not self.headers_done and self.bytes_in > MAX_HEAD_BYTES:  # llhttp has no limit
            raise ProtocolError(f"response headers too large: over {MAX_HEAD_BYTES // 1024} KiB "
                                "without an end")

    def end_of_stream(self, now_ns: int) -> bool:
        """The server closed the connection. True if that ended the response properly
        (a body delimited by the end of the connection, as HTTP/1.0-style streams are)."""
        if self.headers_done and not self.complete and self._eof_delimited:
            self.complete = True
            self.keep_alive = False
            assert self._handler is not None
            self._handler.on_complete(now_ns)
            return True
        return False

    # -- llhttp callbacks -------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:  # interim response (100 Continue): the real one follows
            self._headers = {}
            return
        self.headers_done = True
        headers = self._headers
        self._eof_delimited = ("content-length" not in headers
                               and "chunked" not in headers.get("transfer-encoding", "").lower()
                               and self.status not in (204, 304))
        assert self._handler is not None, "begin() a response before feeding bytes"
        self._handler.on_headers(self.status, headers, self._now_ns)

    def on_body(self, body: bytes) -> None:
        self._handler.on_body(body, self._now_ns)  # type: ignore[union-attr]

    def on_message_complete(self) -> None:
        if not self.headers_done:  # end of an interim response
            return
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        self._handler.on_complete(self._now_ns)  # type: ignore[union-attr]


class ProtocolError(Exception):
    """Bytes that are not a valid HTTP/1.1 response."""
