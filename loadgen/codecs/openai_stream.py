"""Stream parsers: turn a response body, fed in arbitrary pieces, into a RequestRecord.

A parser is plain sync code with no I/O. The transport (HTTP or SageMaker) calls
``feed(chunk, now_ns)`` once per socket read with the arrival timestamp taken
*before* parsing, then ``close(now_ns)`` at end of body. Every event completed
by one read shares that read's timestamp.

:class:`OpenAIStreamParser` reads vLLM's OpenAI SSE stream (chat and completions);
the SageMaker target reuses it for the AWS vLLM container, whose PayloadParts cut
the same SSE bytes at arbitrary offsets.
"""

from __future__ import annotations

from typing import Protocol

import orjson

from ..record import (
    TOKENS_ESTIMATED,
    TOKENS_FROM_CONTINUOUS_USAGE,
    TOKENS_FROM_USAGE,
    RequestRecord,
)
from .sse import SSEDecoder


class StreamParser(Protocol):
    def feed(self, chunk: bytes, now_ns: int) -> None: ...

    def close(self, now_ns: int, cut_short: bool = False) -> None: ...


def record_prompt_usage(record: RequestRecord, usage: dict) -> None:
    """The server's prompt token count and, when it reports one, its prefix-cache hits."""
    if isinstance(usage.get("prompt_tokens"), int):
        record.server_input_tokens = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        record.cached_tokens = details["cached_tokens"]


def _choice_text(choice: dict) -> str | None:
    """Generated text of one streamed choice: chat delta content/reasoning, or completion text."""
    delta = choice.get("delta")
    if delta is None:
        return choice.get("text")
    # Reasoning models stream thoughts first; those are generated tokens too.
    return delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")


TokenLogprob = tuple[str, float, tuple[tuple[str, float], ...]]


def choice_logprobs(choice: dict) -> list[TokenLogprob]:
    """A choice's token logprobs in either API's shape: chat ``{"content": [{"token",
    "logprob", "top_logprobs": [...]}]}`` or completions' parallel lists ``{"tokens",
    "token_logprobs", "top_logprobs": [{token: logprob}]}``. Malformed parts are skipped."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return []
    out: list[TokenLogprob] = []
    content = logprobs.get("content")
    if isinstance(content, list):
        for entry in content:
            if isinstance(entry, dict) and isinstance(entry.get("logprob"), (int, float)):
                top = tuple((t["token"], float(t["logprob"]))
                            for t in entry.get("top_logprobs") or ()
                            if isinstance(t, dict) and isinstance(t.get("logprob"), (int, float)))
                out.append((str(entry.get("token", "")), float(entry["logprob"]), top))
        return out
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    for token, value, top in zip(tokens, values, tops):
        if isinstance(value, (int, float)):
            alternatives = sorted(((str(t), float(v)) for t, v in (top or {}).items()),
                                  key=lambda pair: -pair[1])
            out.append((str(token), float(value), tuple(alternatives)))
    return out


class OpenAIStreamParser:
    """vLLM / OpenAI ``chat.completion.chunk`` and ``text_completion`` SSE streams.

    TTFT is the first chunk with non-empty generated text: vLLM's role-only first
    chunk (``{"role": "assistant", "content": ""}``) does not count.
    Output tokens come from, in order of preference: the final ``usage`` chunk,
    the last cumulative ``usage`` seen on content chunks (``continuous_usage_stats``),
    else one per content chunk (flagged estimated).
    """

    __slots__ = ("record", "_sse", "_parts", "_chunks", "_final_usage", "_running_usage",
                 "done", "finished")

    def __init__(self, record: RequestRecord, keep_text: bool = False) -> None:
        self.record = record
        self._sse = SSEDecoder()
        self._parts: list[str] | None = [] if keep_text else None
        self._chunks = 0
        self._final_usage: int | None = None
        self._running_usage: int | None = None
        self.done = False  # saw ``data: [DONE]``
        self.finished = False  # saw a ``finish_reason``

    def feed(self, chunk: bytes, now_ns: int) -> None:
        for data in self._sse.feed(chunk):
            self._on_event(data, now_ns)

    def _on_event(self, data: bytes, now_ns: int) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.record.fail("bad_json", f"unparseable stream event: {data[:80]!r}", now_ns)
            return
        if type(obj) is not dict:
            return
        choices = obj.get("choices")
        if choices:
            choice = choices[0]
            text = _choice_text(choice)
            if text:
                self.record.content_ns.append(now_ns)
                self._chunks += 1
                if self._parts is not None:
                    self._parts.append(text)
            if self._parts is not None and choice.get("logprobs"):
                self._keep_logprobs(choice)
            if choice.get("finish_reason"):
                self.finished = True
        usage = obj.get("usage")
        if usage:
            tokens = usage.get("completion_tokens")
            if tokens is not None:
                if choices:
                    self._running_usage = tokens
                else:
                    self._final_usage = tokens
            record_prompt_usage(self.record, usage)
        error = obj.get("error")
        if error is not None:
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            self.record.fail("stream_error", str(message)[:300], now_ns)

    def _keep_logprobs(self, choice: dict) -> None:
        if self.record.logprobs is None:
            self.record.logprobs = []
        self.record.logprobs.extend(choice_logprobs(choice))

    def close(self, now_ns: int, cut_short: bool = False) -> None:
        """End of body. ``cut_short``: the transport failed or was cancelled; keep what
        arrived (tokens, text) without judging the stream's end."""
        for data in self._sse.close():
            self._on_event(data, now_ns)
        record = self.record
        record.end_ns = record.end_ns or now_ns
        if self._final_usage is not None:
            record.output_tokens, record.tokens_source = self._final_usage, TOKENS_FROM_USAGE
        elif self._running_usage is not None:
            record.output_tokens = self._running_usage
            record.tokens_source = TOKENS_FROM_CONTINUOUS_USAGE
        else:
            record.output_tokens, record.tokens_source = self._chunks, TOKENS_ESTIMATED
        if self._parts is not None:
            record.text = "".join(self._parts)
        if not cut_short and record.error_type is None and not (self.done or self.finished):
            record.fail("truncated_stream", "stream ended before [DONE] or a finish_reason", now_ns)


def parse_openai_body(record: RequestRecord, body: bytes, now_ns: int, keep_text: bool) -> None:
    """Non-streaming response: the whole body arrives at once, so TTFT equals e2e latency."""
    record.end_ns = now_ns
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        record.fail("bad_json", f"unparseable response body: {body[:80]!r}", now_ns)
        return
    if not isinstance(obj, dict) or "error" in obj:
        error = obj.get("error") if isinstance(obj, dict) else obj
        record.fail("server_error", str(error)[:300], now_ns)
        return
    choices = obj.get("choices") or [{}]
    message = choices[0].get("message")
    text = (message or {}).get("content") if message is not None else choices[0].get("text")
    record.content_ns.append(now_ns)
    usage = obj.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        record.output_tokens, record.tokens_source = usage["completion_tokens"], TOKENS_FROM_USAGE
    else:
        record.output_tokens, record.tokens_source = 1, TOKENS_ESTIMATED
    record_prompt_usage(record, usage)
    if keep_text:
        record.text = text or ""
        if choices[0].get("logprobs"):
            record.logprobs = choice_logprobs(choices[0])
