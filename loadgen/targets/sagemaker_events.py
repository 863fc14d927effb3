"""AWS event-stream frames (InvokeEndpointWithResponseStream) -> a payload parser.

Pure sync code, no I/O. Frame decoding (prelude, headers, both CRC32s) is
botocore's :class:`botocore.eventstream.EventStreamBuffer`. We do not use
botocore's higher-level ``EventStream``: it raises ``EventStreamError`` on the
first exception frame and drops ``ModelStreamError.ErrorCode``, and it hides
which socket read a frame arrived in.

``PayloadPart`` payloads go to the payload parser with the timestamp of the socket
read that completed the frame. Exception and error frames, CRC mismatches and
frames cut off at end of stream fail the record; tokens already parsed stay on it.
"""

from __future__ import annotations

import struct

import orjson
from botocore.eventstream import (
    ChecksumMismatch,
    EventStreamBuffer,
    EventStreamHeaderParser,
    ParserError,
)

from ..errors import one_line
from ..record import RequestRecord
from ..streams import StreamParser

_MAX_CACHED_HEADER_BLOCKS = 8


class _CachingHeaderParser(EventStreamHeaderParser):
    """Every PayloadPart frame carries the same header bytes; parse each distinct block once.

    Header parsing is most of botocore's per-frame cost (pure-Python field-by-field
    unpacking); caching it keeps the SageMaker path within 2x of the HTTP path.
    CRC checks still cover every frame. The returned dicts are shared: read-only.
    """

    def __init__(self) -> None:
        super().__init__()
        self._cache: dict[bytes, dict] = {}

    def parse(self, data: bytes) -> dict:
        headers = self._cache.get(data)
        if headers is None:
            headers = super().parse(data)
            if len(self._cache) < _MAX_CACHED_HEADER_BLOCKS:
                self._cache[data] = headers
        return headers


def new_event_stream_buffer() -> EventStreamBuffer:
    buffer = EventStreamBuffer()
    # botocore offers no constructor argument for this; the attribute has been stable since
    # botocore 1.12 and tests/test_sagemaker_events.py checks it is still the one used.
    buffer._header_parser = _CachingHeaderParser()
    return buffer


class EventStreamReader:
    __slots__ = ("record", "parser", "_buffer", "_pending_bytes", "broken")

    def __init__(self, record: RequestRecord, parser: StreamParser) -> None:
        self.record = record
        self.parser = parser
        self._buffer = new_event_stream_buffer()
        # Bytes fed but not yet part of a complete frame (detects a truncated last frame).
        self._pending_bytes = 0
        # True once the stream can't go on: an exception/error frame or undecodable bytes.
        self.broken = False

    def feed(self, chunk: bytes, now_ns: int) -> None:
        """One socket read. ``now_ns`` was taken when it arrived, before any decoding."""
        if self.broken:
            return
        buffer = self._buffer
        buffer.add_data(chunk)
        self._pending_bytes += len(chunk)
        try:
            for message in buffer:
                self._pending_bytes -= message.prelude.total_length
                headers = message.headers
                message_type = headers.get(":message-type")
                if message_type == "event":
                    if headers.get(":event-type") == "PayloadPart":
                        self.parser.feed(message.payload, now_ns)
                    # Other event types carry nothing we use.
                else:
                    self._on_error_frame(message_type, headers, message.payload, now_ns)
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
        if self._pending_bytes:
            self.record.fail("truncated_frame", f"stream ended inside an event-stream frame "
                             f"({self._pending_bytes} bytes of an incomplete frame)", now_ns)
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

