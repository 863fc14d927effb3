"""vLLM's wire format as bytes: SSE chunks and non-streamed bodies (pure code, no I/O).

Chunk shapes follow vLLM (``shared/reference/vllm-facts.md``): chat chunks are
``chat.completion.chunk`` objects serialised without unset fields; completions chunks
are ``text_completion`` objects with every field (``"usage": null`` included).

Speed matters here (fast mode streams >300k tokens/s): each request gets byte templates
made once by orjson from a real chunk with placeholders, then every token event is a
template head + the token's JSON string + a tail, joined in C by ``bytes.join``.
"""

from __future__ import annotations

import orjson

from ..config import SIMULATOR_OWNER
from .logprobs import completions_logprobs, token_logprobs
from .plan import FILLER_WORDS, Plan, SimRequest

DONE = b"data: [DONE]\n\n"

_HOLE = "\x00hole\x00"  # never in real text; orjson writes it as "\u0000hole\u0000"
_HOLE_JSON = orjson.dumps(_HOLE)
_FILLER_JSON = tuple(orjson.dumps(word) for word in FILLER_WORDS)


def _template(obj: dict) -> list[bytes]:
    """``data: <json>\\n\\n`` cut at each placeholder value."""
    return (b"data: " + orjson.dumps(obj) + b"\n\n").split(_HOLE_JSON)


def encode_pieces(plan: Plan) -> list[bytes]:
    """The JSON string of every token: the answer's pieces, then cycled filler words."""
    encoded = [orjson.dumps(piece) for piece in plan.text_pieces]
    missing = plan.tokens - len(encoded)
    if missing > 0:
        offset = len(encoded) % len(_FILLER_JSON)
        cycles = (offset + missing) // len(_FILLER_JSON) + 1
        encoded += (_FILLER_JSON * cycles)[offset:offset + missing]
    return encoded


def token_strings(plan: Plan) -> list[str]:
    """Every token's text: the answer's pieces, then cycled filler words."""
    missing = plan.tokens - len(plan.text_pieces)
    filler = (FILLER_WORDS * (missing // len(FILLER_WORDS) + 1))[:max(missing, 0)]
    return [*plan.text_pieces, *filler]


def answer_text(plan: Plan) -> str:
    return "".join(token_strings(plan))


def plan_logprobs(req: SimRequest, plan: Plan, model: str) -> list[dict] | None:
    """Chat-shaped logprob entries of every token, when the request asked for them."""
    if req.logprobs is None:
        return None
    return token_logprobs(token_strings(plan), req.prompt_full, model, req.logprobs)


def _choice_logprobs(api: str, entries: list[dict] | None) -> dict | None:
    if entries is None:
        return None
    return {"content": entries} if api == "chat" else completions_logprobs(entries)


class ChunkEncoder:
    """SSE events of one streamed request (chat or completions)."""

    def __init__(self, req: SimRequest, chunk_id: str, created: int, model: str,
                 logprobs: list[dict] | None = None) -> None:
        self._chat = req.api == "chat"
        self._api = req.api
        self._logprobs = logprobs  # per token; None: not asked (the fast template path)
        self._continuous = req.continuous_usage
        self._prompt_tokens = req.prompt_tokens
        self._cached_tokens = req.cached_tokens
        self._envelope = {"id": chunk_id,
                          "object": "chat.completion.chunk" if self._chat else "text_completion",
                          "created": created, "model": model}
        usage = {"prompt_tokens": _HOLE, "total_tokens": _HOLE, "completion_tokens": _HOLE} \
            if self._continuous else None
        # Token events: [head, tail] or, with continuous usage, [head, mid1, mid2, mid3, tail].
        self._token = _template(self._chunk(_HOLE, None, usage))
        self._separator = self._token[-1] + self._token[0]

    def _chunk(self, text, finish_reason: str | None, usage, logprobs: dict | None = None) -> dict:
        if self._chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": logprobs,
                      "finish_reason": finish_reason}
            if finish_reason is not None:
                choice["stop_reason"] = None
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs,
                      "finish_reason": finish_reason, "stop_reason": None}
        obj = {**self._envelope, "choices": [choice]}
        if usage is not None or not self._chat:
            obj["usage"] = usage
        return obj

    def _usage(self, completion_tokens: int) -> dict:
        usage = {"prompt_tokens": self._prompt_tokens,
                 "total_tokens": self._prompt_tokens + completion_tokens,
                 "completion_tokens": completion_tokens}
        if self._cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self._cached_tokens}
        return usage

    def role_chunk(self) -> bytes:
        """Chat's first chunk: the assistant role and empty content (none for completions)."""
        if not self._chat:
            return b""
        obj = {**self._envelope, "choices": [{"index": 0,
                                              "delta": {"role": "assistant", "content": ""},
                                              "logprobs": None, "finish_reason": None}]}
        if self._continuous:
            obj["usage"] = self._usage(0)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def tokens(self, pieces: list[bytes], start: int, end: int) -> bytes:
        """Events for tokens ``start..end-1`` (one event each, no finish reason)."""
        if self._logprobs is not None:
            return b"".join(self._token_with_logprobs(i, None) for i in range(start, end))
        if not self._continuous:
            head, tail = self._token
            return head + self._separator.join(pieces[start:end]) + tail
        head, mid1, mid2, mid3, tail = self._token
        prompt = b"%d" % self._prompt_tokens
        parts: list[bytes] = []
        append = parts.append
        for i in range(start, end):
            append(head)
            append(pieces[i])
            append(mid1)
            append(prompt)
            append(mid2)
            append(b"%d" % (self._prompt_tokens + i + 1))
            append(mid3)
            append(b"%d" % (i + 1))
            append(tail)
        return b"".join(parts)

    def last_token(self, piece: bytes, completion_tokens: int, finish_reason: str) -> bytes:
        """The final token's event, carrying the finish reason (as vLLM sends it)."""
        if self._logprobs is not None:
            return self._token_with_logprobs(completion_tokens - 1, finish_reason)
        usage = self._usage(completion_tokens) if self._continuous else None
        head, tail = _template(self._chunk(_HOLE, finish_reason, usage))
        return head + piece + tail

    def _token_with_logprobs(self, i: int, finish_reason: str | None) -> bytes:
        """One token's event with its logprobs (the slow path: logprob runs are small)."""
        entry = self._logprobs[i]
        usage = self._usage(i + 1) if self._continuous else None
        obj = self._chunk(entry["token"], finish_reason, usage,
                          _choice_logprobs(self._api, [entry]))
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def usage_chunk(self, completion_tokens: int) -> bytes:
        """The ``include_usage`` chunk: empty choices and the request's totals."""
        obj = {**self._envelope, "choices": [], "usage": self._usage(completion_tokens)}
        return b"data: " + orjson.dumps(obj) + b"\n\n"


def full_response(req: SimRequest, plan: Plan, response_id: str, created: int,
                  model: str) -> bytes:
    """A non-streamed chat.completion / text_completion body."""
    text = answer_text(plan)
    logprobs = _choice_logprobs(req.api, plan_logprobs(req, plan, model))
    usage = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + plan.tokens,
             "completion_tokens": plan.tokens,
             "prompt_tokens_details": (None if req.cached_tokens is None
                                       else {"cached_tokens": req.cached_tokens})}
    if req.api == "chat":
        choice = {"index": 0,
                  "message": {"role": "assistant", "reasoning_content": None, "content": text,
                              "tool_calls": []},
                  "logprobs": logprobs, "finish_reason": plan.finish_reason,
                  "stop_reason": None}
        obj = {"id": response_id, "object": "chat.completion", "created": created,
               "model": model, "choices": [choice], "usage": usage, "prompt_logprobs": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": logprobs,
                  "finish_reason": plan.finish_reason, "stop_reason": None,
                  "prompt_logprobs": None}
        obj = {"id": response_id, "object": "text_completion", "created": created,
               "model": model, "choices": [choice], "usage": usage}
    return orjson.dumps(obj)


def models_body(model: str, created: int, max_model_len: int) -> bytes:
    card = {"id": model, "object": "model", "created": created, "owned_by": SIMULATOR_OWNER,
            "root": model, "parent": None, "max_model_len": max_model_len}
    return orjson.dumps({"object": "list", "data": [card]})
