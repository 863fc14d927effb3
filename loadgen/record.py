"""What one request *was*: raw nanosecond timestamps, token counts and its error.

Like aiperf's RequestRecord, a record holds observations only. Every derived
number (TTFT, ITL, TPOT, ...) is computed in one place, :mod:`loadgen.metrics`.

All timestamps are ``time.perf_counter_ns()`` integers taken when bytes arrive
off the socket, before any parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone


def now_iso() -> str:
    """Wall-clock time now, UTC, ISO 8601 to the second: the ``started_at``/``created_at``
    stamps of results, deployment records and reports (never used to measure anything)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# How ``RequestRecord.output_tokens`` was obtained.
TOKENS_FROM_USAGE = "usage"  # final ``usage.completion_tokens`` sent by the server
TOKENS_FROM_CONTINUOUS_USAGE = "continuous_usage"  # per-chunk cumulative usage
TOKENS_ESTIMATED = "estimated"  # one token per content chunk (no usage at all)


@dataclass(frozen=True)
class Prompt:
    """One request to send. ``text`` is the user message (chat) or prompt (completions)."""

    text: str
    max_tokens: int = 128
    # Optional: ask for at least this many tokens (vLLM ``min_tokens``) so lengths are fixed.
    min_tokens: int | None = None
    # Input length as counted locally: exact with a tokenizer (``input_tokens_exact``),
    # else an estimate (synthetic word count, or characters / 4).
    input_tokens: int | None = None
    # Free-form tag carried into results (e.g. a fidelity question id).
    tag: str | None = None
    input_tokens_exact: bool = False
    # Chat history to send instead of one user message (datasets with ``messages``,
    # multi-turn sessions); ``text`` then holds the last user message, for targets that
    # take plain text.
    messages: tuple[dict, ...] | None = None
    # Multi-turn sessions: which session (0, 1, ...) and which turn (1, 2, ...).
    session: int | None = None
    turn: int | None = None
    # Ask for each generated token's log-probability and this many most likely
    # alternatives (fidelity runs; OpenAI ``logprobs``/``top_logprobs``). None: not asked.
    top_logprobs: int | None = None


@dataclass(slots=True)
class RequestRecord:
    """Raw observations of one request. Mutable while the request is in flight, then read-only.

    ``intended_ns``  when the request *should* have been sent (open loop: the schedule;
                     closed loop: when the stream's previous response ended, or the level
                     start). Latencies are measured from it, so client delay is never hidden.
    ``start_ns``     when the request was actually handed to the transport.
    ``sent_ns``      when the request's bytes were written to the socket (0: not observed).
    ``content_ns``   arrival time of each chunk that carried generated text (one entry per
                     content chunk, not per token). Lives only as long as the request.
    ``end_ns``       when the last byte arrived (or the failure was observed).
    """

    intended_ns: int = 0
    start_ns: int = 0
    sent_ns: int = 0
    end_ns: int = 0
    content_ns: list[int] = field(default_factory=list)
    output_tokens: int = 0
    tokens_source: str = TOKENS_ESTIMATED
    input_tokens: int | None = None
    # Error as data: a short type name ("http_500", "timeout", "ModelStreamError", ...)
    # and a one-line message. ``None`` means success.
    error_type: str | None = None
    error_message: str | None = None
    # Generated text is only kept when asked for (fidelity runs); otherwise None.
    text: str | None = None
    # True when the run was stopped while this request was in flight.
    incomplete: bool = False
    tag: str | None = None
    # Sequence number within the run, sent as ``X-Request-Id`` so server logs can be matched.
    request_id: int = 0
    # ``input_tokens`` above is the local count (see Prompt); the server's own numbers
    # (``usage.prompt_tokens`` and ``usage.prompt_tokens_details.cached_tokens``) when sent.
    input_tokens_exact: bool = False
    server_input_tokens: int | None = None
    cached_tokens: int | None = None
    session: int | None = None
    turn: int | None = None
    max_tokens: int | None = None  # what the request asked for (the prompt's max_tokens)
    # Per generated token, when the prompt asked for logprobs and the server sent them:
    # ``(token, logprob, ((alternative, logprob), ...))``, most likely alternative first.
    logprobs: list[tuple[str, float, tuple[tuple[str, float], ...]]] | None = None

    @property
    def ok(self) -> bool:
        return self.error_type is None and not self.incomplete

    @property
    def first_content_ns(self) -> int | None:
        return self.content_ns[0] if self.content_ns else None

    def fail(self, error_type: str, message: str, now_ns: int) -> None:
        """Mark the request failed (first failure wins) at ``now_ns``."""
        if self.error_type is None:
            self.error_type = error_type
            self.error_message = message
        self.end_ns = now_ns
