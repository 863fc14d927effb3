"""AWS event-stream frames (InvokeEndpointWithResponseStream) -> a payload parser.

Pure sync code, no I/O. :class:`FrameSplitter` cuts the byte stream into frames and checks
both CRC32s (prelude and message, with the same limits and exceptions as botocore); each
frame's header block is decoded by botocore's public ``EventStreamHeaderParser``, once per
distinct block (every PayloadPart frame carries the same header bytes, and header decoding is
most of botocore's per-frame cost). botocore's ``EventStreamBuffer`` stays the oracle in the
tests. We do not use botocore's higher-level ``EventStream``: it raises ``EventStreamError``
on the first exception frame, drops ``ModelStreamError.ErrorCode``, and hides which socket
read a frame arrived in.

``PayloadPart`` payloads go to the payload parser with the timestamp of the socket read that
completed the frame. Exception and error frames, CRC mismatches and frames cut off at end of
stream fail the record; tokens already parsed stay on it.
"""

from __future__ import annotations

import struct
from binascii import crc32
from typing import Iterator

import orjson
from botocore.eventstream import (
    ChecksumMismatch,
    EventStreamHeaderParser,
    InvalidHeadersLength,
    InvalidPayloadLength,
    ParserError,
)

from ..errors import one_line
from ..record import RequestRecord
from .openai_stream import StreamParser

_PRELUDE = struct.Struct(">III")  # total length, headers length, prelude CRC32
_CRC = struct.Struct(">I")
_OVERHEAD = _PRELUDE.size + _CRC.size  # prelude + trailing message CRC32
# botocore's own limits (botocore.eventstream._MAX_HEADERS_LENGTH / _MAX_PAYLOAD_LENGTH).
MAX_HEADERS_LENGTH = 128 * 1024
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024
_MAX_CACHED_HEADER_BLOCKS = 8


class FrameSplitter:
    """Bytes in, complete ``(headers, payload)`` frames out; fed in pieces split anywhere."""

    __slots__ = ("_buffer", "_headers", "_cache")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._headers = EventStreamHeaderParser()
        self._cache: dict[bytes, dict] = {}

    @property
    def pending_bytes(self) -> int:
        """Bytes fed that are not (yet) part of a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[tuple[dict, bytes]]:
        """Yield the frames completed by ``data``, in order; raises botocore's
        ``ChecksumMismatch`` / ``ParserError`` at the first invalid one (frames before it
        have been yielded, as botocore does). Header dicts are shared: read-only."""
        buffer = self._buffer
        buffer += data
        offset = 0
        while len(buffer) - offset >= _PRELUDE.size:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(buffer, offset)
            computed = crc32(buffer[offset:offset + 8]) & 0xFFFFFFFF
            if computed != prelude_crc:
                raise ChecksumMismatch(prelude_crc, computed)
            if headers_length > MAX_HEADERS_LENGTH:
                raise InvalidHeadersLength(headers_length)
            payload_length = total - headers_length - _OVERHEAD
            if payload_length > MAX_PAYLOAD_LENGTH:
                raise InvalidPayloadLength(payload_length)
            if payload_length < 0:
                raise ParserError(f"frame length {total} is shorter than its headers")
            if len(buffer) - offset < total:
                break
            end = offset + total
            message_crc = _CRC.unpack_from(buffer, end - 4)[0]
            computed = crc32(buffer[offset:end - 4]) & 0xFFFFFFFF
            if computed != message_crc:
                raise ChecksumMismatch(message_crc, computed)
            start = offset + _PRELUDE.size
            frame = (self._parse_headers(bytes(buffer[start:start + headers_length])),
                     bytes(buffer[start + headers_length:end - 4]))
            offset = end
            yield frame
        if offset:
            del buffer[:offset]

    def _parse_headers(self, block: bytes) -> dict:
        headers = self._cache.get(block)
        if headers is None:
            headers = self._headers.parse(block)
            if len(self._cache) < _MAX_CACHED_HEADER_BLOCKS:
                self._cache[block] = headers
        return headers


class EventStreamReader:
    __slots__ = ("record", "parser", "_frames", "broken")

    def __init__(self, record: RequestRecord, parser: StreamParser) -> None:
        self.record = record
        self.parser = parser
        self._frames = FrameSplitter()
        # True once the stream can't go on: an exception/error frame or undecodable bytes.
        self.broken = False

    def feed(self, chunk: bytes, now_ns: int) -> None:
        """One socket read. ``now_ns`` was taken when it arrived, before any decoding."""
        if self.broken:
            return
        try:
            for headers, payload in self._frames.feed(chunk):
                message_type = headers.get(":message-type")
                if message_type == "event":
                    if headers.get(":event-type") == "PayloadPart":
                        self.parser.feed(payload, now_ns)
                    # Other event types carry nothing we use.
                else:
                    self._on_error_frame(message_type, headers, payload, now_ns)
                    return
        except ChecksumMismatch as err:
            self._break("crc_mismatch", f"event-stream frame failed its CRC32 check: {err}", now_ns)
        except (ParserError, KeyError, struct.error, UnicodeDecodeError) as err:
            # KeyError: unknown header value type; struct.error: short header bytes.
            self._break("bad_frame", f"undecodable event-stream frame: {type(err).__name__}: "
                        f"{str(err)[:200]}", now_ns)

    def _on_error_frame(self, message_type: str | None, headers: dict, payload: bytes,
                        now_ns: int) -> None:
        if message_type == "exception":
            error_type, message = _exception_details(headers, payload)
        elif message_type == "error":
            error_type = str(headers.get(":error-code") or "EventStreamError")
            message = str(headers.get(":error-message") or "")
        else:
            error_type, message = "bad_frame", f"unknown event-stream message type {message_type!r}"
        self._break(error_type, message, now_ns)

    def _break(self, error_type: str, message: str, now_ns: int) -> None:
        self.broken = True
        self.record.fail(error_type, one_line(message, 500), now_ns)

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        """End of the HTTP body: flag a frame cut short, then let the payload parser finish.

        ``cut_short``: the transport failed or was cancelled (already recorded by the caller);
        keep what arrived without judging how the stream ended.
        """
        if self.broken or cut_short:
            self.parser.close(now_ns, cut_short=True)
            return
        pending = self._frames.pending_bytes
        if pending:
            self.record.fail("truncated_frame", f"stream ended inside an event-stream frame "
                             f"({pending} bytes of an incomplete frame)", now_ns)
        self.parser.close(now_ns)


def _exception_details(headers: dict, payload: bytes) -> tuple[str, str]:
    """(type, message) of ``ModelStreamError`` ({"Message", "ErrorCode"}) or
    ``InternalStreamFailure`` ({"Message"})."""
    error_type = str(headers.get(":exception-type") or "EventStreamException")
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        return error_type, payload[:300].decode("utf-8", "replace")
    message = str(body.get("Message") or body.get("message") or "")
    code = body.get("ErrorCode")
    return error_type, f"{code}: {message}" if code else message

