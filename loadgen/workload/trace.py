"""Replaying a production trace in the Mooncake format (JSONL, one request a line).

Each line: ``timestamp`` (ms from the trace's start), ``input_length`` and
``output_length`` (tokens), optional ``hash_ids``: one id per block of
``block_tokens`` prompt tokens (512 in the Mooncake release). Requests sharing a hash id
share that block of prompt text (built deterministically from the id), so the trace's
prefix reuse reaches the server's prefix cache as it did in production.

:class:`TraceReplay` is an open-loop load: request *i* is due at
``start + timestamp_i / speedup``; latency is measured from that due time and the
send's lateness is recorded (``schedule_lag_ms``). :class:`TracePrompts` yields the
matching prompts in the same order.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

from ..bounds import input_tokens_problem, output_tokens_problem, timestamp_problem
from ..errors import ConfigError
from ..load import OPEN_LOOP
from ..record import Prompt
from .prompts import synthetic_text
from .tokenizer import TokenCounter

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0


def _count(obj: dict, key: str, path: Path, lineno: int, low: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{path}:{lineno}: {key} must be an integer >= {low} (got {value!r})")
    bound = input_tokens_problem if key == "input_length" else output_tokens_problem
    if message := bound(value, key):
        raise ConfigError(f"{path}:{lineno}: {message}")
    return value


def load_trace(path: str | Path) -> tuple[TraceRow, ...]:
    """Rows of a Mooncake JSONL trace, validated (``FILE:LINE`` errors), in time order."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read trace {path}: {exc.strerror}") from None
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{path}:{lineno}: not valid JSON; each line must be "
                              '{"timestamp": ms, "input_length": n, "output_length": n}') from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{lineno}: expected a JSON object")
        timestamp = obj.get("timestamp")
        if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
            raise ConfigError(f"{path}:{lineno}: timestamp must be milliseconds >= 0 "
                              f"(got {timestamp!r})")
        if message := timestamp_problem(float(timestamp)):  # NaN, 1e308: no replay time
            raise ConfigError(f"{path}:{lineno}: {message}")
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise ConfigError(f"{path}:{lineno}: hash_ids must be a list of integers")
        rows.append(TraceRow(float(timestamp), _count(obj, "input_length", path, lineno, 1),
                             _count(obj, "output_length", path, lineno, 1), tuple(hash_ids),
                             lineno))
    if not rows:
        raise ConfigError(f"{path}: no requests in the trace")
    return tuple(sorted(rows, key=lambda row: row.timestamp_ms))


@dataclass(frozen=True)
class TraceReplay:
    """Open loop on the trace's own schedule, ``speedup`` times faster."""

    rows: tuple[TraceRow, ...]
    speedup: float = 1.0
    max_in_flight = None  # every request of the trace is sent; none is dropped
    loop = OPEN_LOOP
    streams = None

    def __post_init__(self) -> None:
        if not (self.speedup > 0 and math.isfinite(self.speedup)):
            raise ConfigError(f"--trace-speedup must be a finite number > 0 (got {self.speedup})")
        if self.rows and not self.span_s * 1e9 < 2 ** 62:  # offsets stay integer nanoseconds
            raise ConfigError(f"--trace-speedup {self.speedup:g} stretches the trace to "
                              f"{self.span_s:.3g} s; use a larger speedup")

    def offsets_ns(self) -> Iterator[int]:
        first = self.rows[0].timestamp_ms
        for row in self.rows:
            yield round((row.timestamp_ms - first) * 1e6 / self.speedup)

    @property
    def span_s(self) -> float:
        return (self.rows[-1].timestamp_ms - self.rows[0].timestamp_ms) / 1e3 / self.speedup

    @property
    def rate(self) -> float:
        """Mean requests/s of the replay (1.0 for a trace of one instant)."""
        return (len(self.rows) - 1) / self.span_s if self.span_s > 0 else 1.0

    def describe(self) -> dict:
        return {"mode": "trace", "concurrency": None, "rate": self.rate, "arrival": "trace",
                "speedup": self.speedup, "trace_requests": len(self.rows)}

    @property
    def label(self) -> str:
        return f"trace x{self.speedup:g}"

    def connections_needed(self) -> int:
        return max(1, min(256, math.ceil(self.rate)))

    def default_requests(self) -> int:
        return len(self.rows)  # the whole trace

    def workers_needed(self) -> int:
        return 1

    def split(self, stop, share):
        raise ConfigError("--trace runs in one process only: drop --workers/--ray "
                          "(or use --workers 1)")


@dataclass(frozen=True)
class TracePrompts:
    """The trace's prompts in order: shared blocks for shared hash ids, exact lengths with
    a tokenizer (else about one token per word), ``max_tokens`` = ``output_length``."""

    rows: tuple[TraceRow, ...]
    tokenizer: TokenCounter | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    salt: str | None = None  # of the unshared part; None: a random one per run

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise ConfigError(f"--trace-block-tokens must be >= 1 (got {self.block_tokens})")

    def __iter__(self) -> Iterator[Prompt]:
        blocks: dict[int, str] = {}
        salt = self.salt if self.salt is not None else secrets.token_hex(3) + "-"
        for index, row in enumerate(self.rows):
            yield Prompt(self._text(row, index, blocks, salt), row.output_length,
                         input_tokens=row.input_length,
                         input_tokens_exact=self.tokenizer is not None)

    def _block(self, hash_id: int, blocks: dict[int, str]) -> str:
        if hash_id not in blocks:
            text = synthetic_text(self.block_tokens + 8, hash_id, "block ")
            if self.tokenizer is not None:
                text = self.tokenizer.cut(text, self.block_tokens) or text
            else:  # about one token per word
                text = " ".join(text.split()[:self.block_tokens])
            blocks[hash_id] = text + " "
        return blocks[hash_id]

    def _text(self, row: TraceRow, index: int, blocks: dict[int, str], salt: str) -> str:
        shared = "".join(self._block(h, blocks) for h in row.hash_ids)
        if self.tokenizer is None:
            # About one token per word: keep the blocks' words up to the input length.
            words = (shared + synthetic_text(row.input_length + 8, index, salt)).split()
            return " ".join(words[:row.input_length])
        # Unique filler after the blocks covers a trace whose blocks fall short.
        text = shared + synthetic_text(row.input_length + 8, index, salt)
        cut = self.tokenizer.cut(text, row.input_length)
        if cut is None:
            raise ConfigError(f"trace line {row.line}: cannot make a prompt of exactly "
                              f"{row.input_length} tokens with the tokenizer")
        return cut
