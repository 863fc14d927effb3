"""What the model container puts inside SageMaker PayloadParts, and what it is sent.

Pure sync code, no I/O. Every stream parser has the :class:`loadgen.codecs.openai_stream.StreamParser`
shape: ``feed(chunk, now_ns)`` once per PayloadPart (with the timestamp of the socket
read that carried it), then ``close(now_ns, cut_short)`` (``cut_short``: the transport
failed or was cancelled, so keep what arrived without judging the stream's end).
PayloadPart boundaries are arbitrary: an event, a JSON line or a UTF-8 character can be
cut anywhere, and several events can share one part, so every parser buffers bytes and
decodes only complete units.

Formats:

``openai``  the AWS vLLM container: vLLM's OpenAI SSE stream, passed through unchanged.
            Parsed by :class:`loadgen.codecs.openai_stream.OpenAIStreamParser` (the HTTP target's parser).
``lmi``     DJL/LMI containers: JSON lines ``{"token": {"text": ...}}``, the last line adds
            ``generated_text``/``details``. Chat-style LMI requests stream JSON lines of
            OpenAI chunks instead; both are handled.
``tgi``     Text Generation Inference: SSE ``data:{...}`` (no space) carrying token objects.
``raw``     anything else: each non-empty PayloadPart counts as one content chunk.
``auto``    decided per response from the container's content type and first bytes.
"""

from __future__ import annotations

import codecs
from typing import Any

import orjson

from ..config import RequestOptions
from ..errors import ConfigError
from ..record import TOKENS_ESTIMATED, TOKENS_FROM_USAGE, Prompt, RequestRecord
from .openai_request import openai_body
from .openai_stream import OpenAIStreamParser, StreamParser, parse_openai_body
from .sse import SSEDecoder

PAYLOAD_FORMATS = ("auto", "openai", "lmi", "tgi", "raw")

# Content types (X-Amzn-SageMaker-Content-Type) that settle the framing without sniffing.
_JSON_LINES_TYPES = ("application/jsonlines", "application/json-lines", "application/x-ndjson",
                     "application/jsonl")
_SSE_PREFIXES = (b"data:", b":", b"event:", b"id:", b"retry:")


def check_payload_format(payload_format: str) -> str:
    if payload_format not in PAYLOAD_FORMATS:
        raise ConfigError(f"unknown payload format {payload_format!r}: "
                          f"use one of {', '.join(PAYLOAD_FORMATS)}")
    return payload_format


# --------------------------------------------------------------------------- requests

def request_body(payload_format: str, prompt: Prompt, options: RequestOptions) -> dict[str, Any]:
    """The JSON body for one prompt; ``auto`` and ``raw`` send the OpenAI body (AWS vLLM)."""
    if payload_format in ("lmi", "tgi"):
        return _text_generation_body(payload_format, prompt, options)
    return openai_body(prompt, options, options.model)


def _text_generation_body(payload_format: str, prompt: Prompt,
                          options: RequestOptions) -> dict[str, Any]:
    # ``details`` makes the container report generated_tokens (exact output counts).
    parameters: dict[str, Any] = {"max_new_tokens": prompt.max_tokens, "details": True}
    if options.temperature > 0:
        parameters["do_sample"] = True
        parameters["temperature"] = options.temperature
    else:
        # TGI and LMI reject temperature=0; greedy decoding is do_sample=false.
        parameters["do_sample"] = False
    if options.ignore_eos and payload_format == "lmi":
        parameters["ignore_eos_token"] = True  # LMI's vLLM backend; TGI has no equivalent
    return {"inputs": prompt.text, "parameters": parameters, "stream": options.stream}


# --------------------------------------------------------------------------- token objects

class _TokenEvents:
    """Shared bookkeeping for LMI and TGI token objects (one object per generated token)."""

    __slots__ = ("record", "_parts", "_tokens", "_reported_tokens", "finished")

    def __init__(self, record: RequestRecord, keep_text: bool) -> None:
        self.record = record
        self._parts: list[str] | None = [] if keep_text else None
        self._tokens = 0
        self._reported_tokens: int | None = None
        self.finished = False

    def on_object(self, obj: Any, now_ns: int) -> None:
        if type(obj) is not dict:
            return
        if obj.get("error") is not None:
            self.record.fail("stream_error", str(obj["error"])[:300], now_ns)
            return
        token = obj.get("token")
        if isinstance(token, dict):
            self._on_token(token, now_ns)
        outputs = obj.get("outputs")  # LMI dynamic-batch streaming: {"outputs": ["text"]}
        if isinstance(outputs, list) and outputs:
            self._on_text("".join(str(item) for item in outputs), now_ns)
            self._tokens += 1
        details = obj.get("details")
        if obj.get("generated_text") is not None or details is not None:
            self._on_final(details, now_ns)

    def _on_token(self, token: dict, now_ns: int) -> None:
        if isinstance(token.get("id"), int) and token["id"] < 0:
            return  # LMI's placeholder token on its error line, not a generated token
        self._tokens += 1
        if not token.get("special") and not token.get("special_token"):
            self._on_text(token.get("text"), now_ns)

    def _on_text(self, text: str | None, now_ns: int) -> None:
        if text:
            self.record.content_ns.append(now_ns)
            if self._parts is not None:
                self._parts.append(text)

    def _on_final(self, details: Any, now_ns: int) -> None:
        self.finished = True
        if not isinstance(details, dict):
            return
        if details.get("finish_reason") == "error":
            self.record.fail("stream_error", "the container reported finish_reason=error", now_ns)
        if isinstance(details.get("generated_tokens"), int):
            self._reported_tokens = details["generated_tokens"]

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        record = self.record
        record.end_ns = record.end_ns or now_ns
        if self._reported_tokens is not None:
            record.output_tokens, record.tokens_source = self._reported_tokens, TOKENS_FROM_USAGE
        else:
            record.output_tokens, record.tokens_source = self._tokens, TOKENS_ESTIMATED
        if self._parts is not None:
            record.text = "".join(self._parts)
        if not cut_short and record.error_type is None and not self.finished:
            record.fail("truncated_stream", "stream ended before the final generated_text/details",
                        now_ns)


def _loads(data: bytes, record: RequestRecord, now_ns: int) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        record.fail("bad_json", f"unparseable stream event: {data[:80]!r}", now_ns)
        return None


# --------------------------------------------------------------------------- parsers

class LMIStreamParser:
    """JSON lines. The first line decides: token objects, or OpenAI chunks (LMI chat)."""

    __slots__ = ("record", "_keep_text", "_tail", "_tokens", "_openai")

    def __init__(self, record: RequestRecord, keep_text: bool = False) -> None:
        self.record = record
        self._keep_text = keep_text
        self._tail = b""
        self._tokens: _TokenEvents | None = None
        self._openai: OpenAIStreamParser | None = None

    def feed(self, chunk: bytes, now_ns: int) -> None:
        lines = (self._tail + chunk).split(b"\n") if self._tail else chunk.split(b"\n")
        self._tail = lines.pop()
        for line in lines:
            line = line.strip()
            if line:
                self._on_line(line, now_ns)

    def _on_line(self, line: bytes, now_ns: int) -> None:
        if self._openai is not None:
            # LMI chat lines are OpenAI chunks without SSE framing: frame them and reuse the parser.
            self._openai.feed(b"data:" + line + b"\n\n", now_ns)
            return
        obj = _loads(line, self.record, now_ns)
        if self._tokens is None:
            if isinstance(obj, dict) and "choices" in obj:
                self._openai = OpenAIStreamParser(self.record, self._keep_text)
                self._openai.feed(b"data:" + line + b"\n\n", now_ns)
                return
            self._tokens = _TokenEvents(self.record, self._keep_text)
        self._tokens.on_object(obj, now_ns)

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        if self._tail.strip() and not cut_short:  # a last line without its newline
            self._on_line(self._tail.strip(), now_ns)
        self._tail = b""
        if self._openai is not None:
            self._openai.close(now_ns, cut_short)
        else:
            (self._tokens or _TokenEvents(self.record, self._keep_text)).close(now_ns, cut_short)


class TGIStreamParser:
    """SSE (``data:{...}``) carrying TGI token objects."""

    __slots__ = ("record", "_sse", "_tokens")

    def __init__(self, record: RequestRecord, keep_text: bool = False) -> None:
        self.record = record
        self._sse = SSEDecoder()
        self._tokens = _TokenEvents(record, keep_text)

    def feed(self, chunk: bytes, now_ns: int) -> None:
        for data in self._sse.feed(chunk):
            self._on_event(data, now_ns)

    def _on_event(self, data: bytes, now_ns: int) -> None:
        if data == b"[DONE]":
            return
        self._tokens.on_object(_loads(data, self.record, now_ns), now_ns)

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        for data in self._sse.close():
            self._on_event(data, now_ns)
        self._tokens.close(now_ns, cut_short)


class RawStreamParser:
    """Unknown payloads: every non-empty PayloadPart is one content chunk (tokens estimated)."""

    __slots__ = ("record", "_chunks", "_decoder", "_parts")

    def __init__(self, record: RequestRecord, keep_text: bool = False) -> None:
        self.record = record
        self._chunks = 0
        # An incremental decoder keeps a UTF-8 character cut between parts intact.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace") if keep_text else None
        self._parts: list[str] = []

    def feed(self, chunk: bytes, now_ns: int) -> None:
        if not chunk:
            return
        self.record.content_ns.append(now_ns)
        self._chunks += 1
        if self._decoder is not None:
            self._parts.append(self._decoder.decode(chunk))

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        record = self.record
        record.end_ns = record.end_ns or now_ns
        record.output_tokens, record.tokens_source = self._chunks, TOKENS_ESTIMATED
        if self._decoder is not None:
            self._parts.append(self._decoder.decode(b"", final=True))
            record.text = "".join(self._parts)


_PARSERS = {"openai": OpenAIStreamParser, "lmi": LMIStreamParser, "tgi": TGIStreamParser,
            "raw": RawStreamParser}


class AutoStreamParser:
    """Holds the first parts (with their timestamps) until the format is known, then replays."""

    __slots__ = ("record", "_keep_text", "_content_type", "_pending", "_parser", "format")

    def __init__(self, record: RequestRecord, keep_text: bool = False,
                 content_type: str | None = None) -> None:
        self.record = record
        self._keep_text = keep_text
        self._content_type = (content_type or "").split(";")[0].strip().lower()
        self._pending: list[tuple[bytes, int]] = []
        self._parser: StreamParser | None = None
        self.format: str | None = None  # the detected format, once known

    def feed(self, chunk: bytes, now_ns: int) -> None:
        if self._parser is not None:
            self._parser.feed(chunk, now_ns)
            return
        self._pending.append((chunk, now_ns))
        detected = sniff_format(b"".join(part for part, _ in self._pending), self._content_type)
        if detected is not None:
            self._start(detected)

    def _start(self, payload_format: str) -> None:
        self.format = payload_format
        self._parser = parser = _PARSERS[payload_format](self.record, self._keep_text)
        for chunk, now_ns in self._pending:
            parser.feed(chunk, now_ns)
        self._pending = []

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        if self._parser is None:
            data = b"".join(part for part, _ in self._pending)
            self._start(sniff_format(data, self._content_type, final=True) or "raw")
        assert self._parser is not None
        self._parser.close(now_ns, cut_short)


def sniff_format(data: bytes, content_type: str = "", final: bool = False) -> str | None:
    """The payload format of a stream starting with ``data``; ``None`` while undecidable."""
    if content_type in _JSON_LINES_TYPES:
        return "lmi"
    head = data.lstrip()
    if not head:
        return "raw" if final else None
    if head[:1] == b"{":
        return "lmi"
    if head.startswith(_SSE_PREFIXES):
        return _sniff_sse(head, final)
    if not final and any(prefix.startswith(head) for prefix in _SSE_PREFIXES):
        return None  # e.g. b"da": wait for more bytes
    return "raw"


def _sniff_sse(data: bytes, final: bool) -> str | None:
    """OpenAI chunks vs TGI token objects, from the shape of the first SSE event."""
    decoder = SSEDecoder()
    events = decoder.feed(data) + (decoder.close() if final else [])
    if not events:
        return "openai" if final else None
    try:
        first = orjson.loads(events[0])
    except orjson.JSONDecodeError:
        return "openai"  # [DONE] or garbage: the OpenAI parser reports it
    if isinstance(first, dict) and ("token" in first or "generated_text" in first):
        return "tgi"
    return "openai"


def make_stream_parser(payload_format: str, record: RequestRecord, keep_text: bool,
                       content_type: str | None = None) -> StreamParser:
    if payload_format == "auto":
        return AutoStreamParser(record, keep_text, content_type)
    return _PARSERS[payload_format](record, keep_text)


# --------------------------------------------------------------------------- whole bodies

def parse_body(payload_format: str, record: RequestRecord, body: bytes, now_ns: int,
               keep_text: bool) -> str:
    """Non-streaming (InvokeEndpoint) body; TTFT equals the full latency. Returns the format."""
    if payload_format == "auto":
        payload_format = _sniff_body(body)
    if payload_format == "openai":
        parse_openai_body(record, body, now_ns, keep_text)
    elif payload_format in ("lmi", "tgi"):
        _parse_generated_text(record, body, now_ns, keep_text)
    else:
        record.end_ns = now_ns
        record.content_ns.append(now_ns)
        record.output_tokens, record.tokens_source = 1, TOKENS_ESTIMATED
        if keep_text:
            record.text = body.decode("utf-8", "replace")
    return payload_format


def _sniff_body(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "raw"
    if isinstance(obj, list) and obj:  # TGI wraps its result in a list, LMI does not
        return "tgi" if isinstance(obj[0], dict) and "generated_text" in obj[0] else "raw"
    if isinstance(obj, dict) and "generated_text" in obj:
        return "lmi"
    return "openai" if isinstance(obj, dict) else "raw"


def _parse_generated_text(record: RequestRecord, body: bytes, now_ns: int, keep_text: bool) -> None:
    record.end_ns = now_ns
    obj = _loads(body, record, now_ns)
    if isinstance(obj, list) and obj:  # TGI (and LMI tgi_compat) wrap the result in a list
        obj = obj[0]
    if not isinstance(obj, dict) or obj.get("error") is not None or "generated_text" not in obj:
        if record.error_type is None:
            error = obj.get("error") if isinstance(obj, dict) else obj
            record.fail("server_error", str(error)[:300], now_ns)
        return
    details = obj.get("details") if isinstance(obj.get("details"), dict) else {}
    if details.get("finish_reason") == "error":
        record.fail("server_error", "the container reported finish_reason=error", now_ns)
        return
    record.content_ns.append(now_ns)
    if isinstance(details.get("generated_tokens"), int):
        record.output_tokens, record.tokens_source = details["generated_tokens"], TOKENS_FROM_USAGE
    else:
        record.output_tokens, record.tokens_source = 1, TOKENS_ESTIMATED
    if keep_text:
        record.text = obj.get("generated_text") or ""
