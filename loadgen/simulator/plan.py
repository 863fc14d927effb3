"""From a request body to what the simulator will send back (pure code, no I/O).

:func:`parse_request` validates a chat/completions body the way vLLM does (same status
codes and error shapes); :func:`plan_response` decides, deterministically from the
profile's seed, the answer tokens, the finish reason and any injected fault.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

import orjson

from .profile import SimProfile

Responder = Callable[[str], str]

FAULT_500 = "http_500"
FAULT_429 = "http_429"
FAULT_DISCONNECT = "disconnect"
FAULT_STALL = "stall"

# One token per word or punctuation mark, leading whitespace attached, so that the
# pieces always join back into the exact text.
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")

# Deterministic padding when the answer is shorter than the tokens asked for.
FILLER_WORDS = tuple(" " + w for w in (
    "the model streams this filler text so that every simulated answer has exactly "
    "the number of tokens the request asked for while the timing follows the profile "
    "of a batched decoder that shares each step between all running sequences and "
    "queues the rest until a slot frees up again"
).split())


class HttpError(Exception):
    """A request vLLM would refuse: answered with ``error_body(...)`` and ``status``."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> bytes:
    """vLLM's ``ErrorResponse`` JSON (0.10+ shape: an ``error`` object)."""
    return orjson.dumps({"error": {"message": message, "type": err_type, "param": param,
                                   "code": status}})


def _bad_request(message: str, param: str | None = None) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, message, "BadRequestError", param)


@dataclass(frozen=True)
class SimRequest:
    """The parts of a chat/completions request the simulator acts on."""

    api: str  # "chat" or "completions"
    stream: bool
    include_usage: bool
    continuous_usage: bool
    prompt_text: str  # what the responder sees: last user message, or the prompt
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    prompt_full: str = ""  # every message's text joined (what the prefix cache sees)
    cached_tokens: int | None = None  # prefix-cache hits, when the profile caches
    # Alternatives per token asked for (chat: logprobs + top_logprobs; completions:
    # logprobs); None: no logprobs asked.
    logprobs: int | None = None


def estimate_tokens(text: str) -> int:
    """Prompt tokens without a tokenizer: about 4 characters per token, at least 1."""
    return max(1, (len(text) + 3) // 4)


def _message_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _prompt_of(body: dict, api: str) -> tuple[str, str]:
    """(text for the responder, the whole prompt's text)."""
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or \
                not all(isinstance(m, dict) for m in messages):
            raise _bad_request("messages must be a non-empty list of message objects", "messages")
        texts = [_message_text(m.get("content")) for m in messages]
        users = [t for m, t in zip(messages, texts) if m.get("role") == "user"]
        return (users[-1] if users else texts[-1]), "".join(texts)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise _bad_request("Either prompt or prompt_embeds must be provided and non-empty.",
                           "prompt")
    return prompt, prompt


def _int_field(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_request(f"{name} must be an integer, got {value!r}.", name)
    return value


def parse_request(raw: bytes, api: str, profile: SimProfile) -> SimRequest:
    """Validate a request body like vLLM: 400 for bad input, 404 for an unknown model."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad_request(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise _bad_request("the request body must be a JSON object")
    stream = bool(body.get("stream"))
    stream_options = body.get("stream_options")
    if stream_options and not stream:
        raise _bad_request("Stream options can only be defined when `stream=True`.",
                           "stream_options")
    if not isinstance(stream_options, dict):
        stream_options = {}
    if body.get("n", 1) != 1:
        raise _bad_request("the simulator only supports n=1", "n")
    prompt_text, prompt_full = _prompt_of(body, api)
    prompt_tokens = estimate_tokens(prompt_full)
    max_tokens = _int_field(body, "max_completion_tokens") if api == "chat" else None
    max_tokens = max_tokens or _int_field(body, "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise _bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    if max_tokens is None:
        max_tokens = max(profile.max_model_len - prompt_tokens, 1)
    if prompt_tokens + max_tokens > profile.max_model_len:
        raise _bad_request(
            f"This model's maximum context length is {profile.max_model_len} tokens. However, "
            f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens} in the completion). Please reduce the length of the "
            "messages or completion.", "max_tokens")
    min_tokens = _int_field(body, "min_tokens") or 0
    if not 0 <= min_tokens <= max_tokens:
        raise _bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                           f"got {min_tokens}.", "min_tokens")
    model = body.get("model")
    if model is not None and model != profile.model:
        raise HttpError(HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist.",
                        "NotFoundError", "model")
    include_usage = bool(stream_options.get("include_usage"))
    logprobs = _logprobs_asked(body, api, profile)
    return SimRequest(
        api=api, stream=stream, include_usage=include_usage,
        # vLLM only honours continuous_usage_stats together with include_usage.
        continuous_usage=include_usage and bool(stream_options.get("continuous_usage_stats")),
        prompt_text=prompt_text, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
        min_tokens=min_tokens, ignore_eos=bool(body.get("ignore_eos")), prompt_full=prompt_full,
        logprobs=logprobs)


def _logprobs_asked(body: dict, api: str, profile: SimProfile) -> int | None:
    """Alternatives per token the request asks for; vLLM's 400 above ``--max-logprobs``."""
    if api == "chat":
        if not body.get("logprobs"):
            return None
        asked = _int_field(body, "top_logprobs") or 0
    else:
        asked = _int_field(body, "logprobs")
        if asked is None:
            return None
    if asked > profile.max_logprobs:
        raise _bad_request(f"Requested sample logprobs of {asked}, which is greater than max "
                           f"allowed: {profile.max_logprobs}", "logprobs")
    return max(asked, 0)


def split_tokens(text: str) -> list[str]:
    """One piece per word or punctuation mark; ``"".join(pieces) == text``."""
    return _PIECE.findall(text)


@dataclass(frozen=True)
class Plan:
    """What one request gets. Tokens past ``len(text_pieces)`` are filler words."""

    tokens: int  # completion tokens to send (>= 1)
    text_pieces: tuple[str, ...]  # the responder's answer, cut to ``tokens``
    finish_reason: str  # "length" or "stop"
    fault: str | None
    fault_at: int  # disconnect after this many tokens / stall before this token
    rng: random.Random  # seeded per request; drives jitter after the plan is made


def _natural_length(req: SimRequest, profile: SimProfile, pieces: list[str] | None) -> int:
    """Where the answer would end on its own (EOS), deterministic per prompt and seed."""
    if pieces is not None:
        return max(len(pieces), 1)
    low = max(profile.natural_tokens // 2, 1)
    high = max(profile.natural_tokens * 3 // 2, low)
    digest = zlib.crc32(f"{profile.seed}\0{req.prompt_text}".encode("utf-8", "replace"))
    return low + digest % (high - low + 1)


def _draw_fault(rng: random.Random, profile: SimProfile) -> str | None:
    draw = rng.random()
    for fault, fraction in ((FAULT_500, profile.fault_500), (FAULT_429, profile.fault_429),
                            (FAULT_DISCONNECT, profile.fault_disconnect),
                            (FAULT_STALL, profile.fault_stall)):
        if draw < fraction:
            return fault
        draw -= fraction
    return None


def plan_response(req: SimRequest, profile: SimProfile, responder: Responder | None,
                  request_number: int) -> Plan:
    """Answer length, finish reason and fault of the ``request_number``-th request."""
    pieces = split_tokens(responder(req.prompt_text)) if responder is not None else None
    natural = _natural_length(req, profile, pieces)
    if req.ignore_eos:
        tokens = req.max_tokens
    else:
        tokens = min(req.max_tokens, max(natural, req.min_tokens))
    finish = "length" if tokens == req.max_tokens and (req.ignore_eos or natural >= tokens) \
        else "stop"
    rng = random.Random(profile.seed * 1_000_003 + request_number)
    fault = _draw_fault(rng, profile)
    # Cut or stall strictly inside the stream when it has room for it.
    fault_at = rng.randint(1, tokens - 1) if tokens >= 2 else 0
    return Plan(tokens=tokens, text_pieces=tuple((pieces or ())[:tokens]), finish_reason=finish,
                fault=fault, fault_at=fault_at, rng=rng)
