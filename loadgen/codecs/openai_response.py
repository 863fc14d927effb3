"""What one OpenAI-compatible HTTP response means for its record: no I/O, used by both transports.

Both the streaming transport (:mod:`.http_pool`, fed from ``data_received``) and the aiohttp
transport (fed from ``iter_any``) drive the same :class:`OpenAIResponse`, so the two give
the same records for the same bytes.

- 200 with ``text/event-stream`` (streaming asked): the body goes to
  :class:`~loadgen.codecs.openai_stream.OpenAIStreamParser` with each read's arrival time.
- 200 to a streaming request with another content type: ``unexpected_content_type``
  (a server that ignores ``"stream": true`` would otherwise look like a truncated stream).
- 200, not streaming: the whole body is one completion (:func:`parse_openai_body`).
- Anything else: ``http_<status>`` with the server's own error message.
"""

from __future__ import annotations

import orjson

from ..errors import one_line
from ..record import RequestRecord
from .openai_stream import OpenAIStreamParser, parse_openai_body

_ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error or unexpected body kept for its message


def error_message(body: bytes) -> str:
    """The ``message`` of an OpenAI/vLLM error body, else the body's start."""
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = err.get("message") if isinstance(err, dict) else err
        return one_line(msg or obj)
    except (orjson.JSONDecodeError, AttributeError):
        return one_line(body[:200].decode("utf-8", "replace"))


class OpenAIResponse:
    """Fills ``record`` from one response's status, headers and body pieces."""

    __slots__ = ("record", "stream", "keep_text", "parser", "status", "content_type", "_body",
                 "_size", "location")

    def __init__(self, record: RequestRecord, stream: bool, keep_text: bool) -> None:
        self.record = record
        self.stream = stream
        self.keep_text = keep_text
        self.parser: OpenAIStreamParser | None = None
        self.status = 0
        self.content_type = ""
        self._body: list[bytes] = []
        self._size = 0
        self.location: str | None = None  # a redirect's Location (not followed)

    def on_headers(self, status: int, headers, now_ns: int) -> None:
        self.status = status
        self.content_type = headers.get("content-type", "")
        if 300 <= status < 400:
            self.location = headers.get("location")
        if status == 200 and self.stream and "text/event-stream" in self.content_type.lower():
            self.parser = OpenAIStreamParser(self.record, self.keep_text)

    def on_body(self, data: bytes, now_ns: int) -> None:
        parser = self.parser
        if parser is not None:
            parser.feed(data, now_ns)
        elif self._size < _ERROR_BODY_LIMIT or (self.status == 200 and not self.stream):
            self._body.append(data)
            self._size += len(data)

    def on_complete(self, now_ns: int) -> None:
        if self.parser is not None:
            self.parser.close(now_ns)
            return
        body = b"".join(self._body)
        record = self.record
        if self.status != 200:
            message = error_message(body)
            if self.location is not None:  # where the server wants us: --target should say so
                message = one_line(f"redirected to Location: {self.location} (not followed; "
                                   f"point --target there) {message}".rstrip())
            record.fail(f"http_{self.status}", message, now_ns)
        elif self.stream:
            record.fail("unexpected_content_type",
                        f"HTTP 200 with Content-Type {self.content_type or 'none'!r} to a "
                        f"streaming request (expected text/event-stream): "
                        f"{error_message(body)[:120]}", now_ns)
        else:
            parse_openai_body(record, body, now_ns, self.keep_text)

    def on_failure(self, error_type: str, message: str, now_ns: int) -> None:
        self.record.fail(error_type, message, now_ns)
        self.cut_short(now_ns)

    def cut_short(self, now_ns: int) -> None:
        """The exchange ended early (failure, cancellation): keep tokens and text that arrived."""
        parser, self.parser = self.parser, None  # closed once, even if cancelled after a failure
        if parser is not None:
            parser.close(now_ns, cut_short=True)
        self.record.end_ns = self.record.end_ns or now_ns
