"""Where prompts come from: synthetic text of a given length, or a dataset.

Synthetic prompts start with a per-run salt and the request's number, then filler
words from a varied start, so two requests never share an accidental prefix (not
even across runs against the same server's prefix cache) unless ``--shared-prefix-tokens``
asks for one. With a tokenizer, each prompt is cut to exactly the drawn token count;
without one, a prompt is about one token per word and its count is an estimate.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import random
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from ..bounds import (
    input_tokens_problem,
    max_input_tokens,
    max_output_tokens,
    output_tokens_problem,
)
from ..errors import ConfigError
from ..record import Prompt
from .datasets import Dataset, DatasetRow, load_dataset
from .tokenizer import TokenCounter, estimate_tokens

# A fixed vocabulary of common one-token English words: synthetic prompts are
# deterministic and come out close to one token per word on common tokenizers.
_WORDS = ("the of and to in is was for on that with as by at from his her which an be this "
          "are were had have not but all they one more said time can so what there if would "
          "about up out them other some could into than then only its over also two new first "
          "after these well any may very way where much most through back just before").split()
DEFAULT_OUTPUT_TOKENS = 128


def request_tag(index: int, salt: str = "") -> str:
    """A prompt's unique start: a hash of ``salt`` and ``index``, then the number."""
    digest = hashlib.blake2s(f"{salt}{index}".encode(), digest_size=4).hexdigest()
    return f"{digest} request {index}:"


def synthetic_text(tokens: int, index: int = 0, salt: str = "") -> str:
    """About ``tokens`` tokens of deterministic filler. It starts with a hash of ``salt``
    and ``index``, so prompts differ from their first token on (no accidental prefix-cache
    hits across requests), then varies where the filler starts."""
    words = [request_tag(index, salt)]
    n = len(_WORDS)
    words += (_WORDS[(index * 7 + i) % n] for i in range(max(tokens - 5, 1)))
    return " ".join(words)


def draw_length(rng: random.Random | None, mean: int, stdev: float, low: int = 1,
                high: int | None = None) -> int:
    """``mean`` exactly (no stdev; ``rng`` may be None), or a normal draw around it
    (rounded, at least ``low``, at most ``high`` when given: a draw never exceeds the run's
    token bound)."""
    if not stdev or rng is None:
        return max(mean, low)
    value = max(low, round(rng.gauss(mean, stdev)))
    return value if high is None else min(value, high)


def check_token_bounds(input_tokens: int, output_tokens: int | None, min_tokens: int | None,
                       input_stdev: float, output_stdev: float) -> None:
    """Token counts and spreads within :mod:`loadgen.bounds` (one line before any load)."""
    for value, what, problem in (
            (input_tokens, "--input-tokens", input_tokens_problem),
            (input_stdev, "--input-tokens-stdev", input_tokens_problem),
            (output_tokens, "--output-tokens", output_tokens_problem),
            (output_stdev, "--output-tokens-stdev", output_tokens_problem),
            (min_tokens, "--min-tokens", output_tokens_problem)):
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{what} must be a finite number (got {value!r})")
        if message := problem(value, what):
            raise ConfigError(message)


@dataclass(frozen=True)
class Session:
    """A multi-turn conversation: its user turns are sent in order on one stream, each
    request carrying the whole history so far (the model's earlier answers included).
    ``turns`` hold each turn's own user message and ``max_tokens``."""

    index: int
    turns: tuple[Prompt, ...]
    think_s: float = 0.0
    count: Callable[[str], int] = estimate_tokens
    exact: bool = False

    def prompt(self, turn: int, history: tuple[dict, ...]) -> Prompt:
        """Turn ``turn`` (1-based) after ``history`` (earlier messages and answers)."""
        own = self.turns[turn - 1]
        messages = (*history, {"role": "user", "content": own.text})
        return replace(own, messages=messages, session=self.index, turn=turn,
                       input_tokens=sum(self.count(m["content"]) for m in messages),
                       input_tokens_exact=self.exact)


@dataclass(frozen=True)
class PromptSource:
    """The prompts of a run, by run-wide request index: :meth:`prompt` is pure in
    (``seed``, ``salt``, index), and iterating yields ``prompt(0), prompt(1), ...`` (with
    a run salt, :meth:`salted`). So one process, N worker processes and Ray actors send
    the same prompt for the same request, whoever sends it.

    ``output_tokens=None`` means: a dataset row's ``max_tokens``, else its reference
    answer's length, else 128. Stdevs make lengths normal draws around the means.
    Dataset rows are sampled with ``seed``: a shuffled pass after pass (without
    replacement), or independent draws (``replacement``). ``texts`` (legacy) are sent in order.
    """

    input_tokens: int = 128
    output_tokens: int | None = DEFAULT_OUTPUT_TOKENS
    min_tokens: int | None = None
    texts: tuple[str, ...] = ()
    input_stdev: float = 0.0
    output_stdev: float = 0.0
    tokenizer: TokenCounter | None = None
    dataset: Dataset | None = None
    replacement: bool = False
    seed: int = 0
    salt: str | None = None  # None: a random one per iteration (per run)
    shared_prefix_tokens: int = 0
    prefix_groups: int = 1
    turns: int = 1  # > 1: yields Sessions of this many turns (a dataset row's own, at most)
    think_s: float = 0.0  # pause between a session's answer and its next turn
    # Made once per source, pure in their keys: exact-length filler by token count, and
    # shared prefixes by group (a tokenizer pass each).
    _made: dict[Any, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        checks = [(self.input_tokens >= 1, f"--input-tokens must be >= 1 (got {self.input_tokens})"),
                  (self.output_tokens is None or self.output_tokens >= 1,
                   f"--output-tokens must be >= 1 (got {self.output_tokens})"),
                  (self.input_stdev >= 0 and self.output_stdev >= 0,
                   "--input-tokens-stdev and --output-tokens-stdev must be >= 0"),
                  (self.prefix_groups >= 1, f"--prefix-groups must be >= 1 (got {self.prefix_groups})"),
                  (self.turns >= 1, f"--turns must be >= 1 (got {self.turns})"),
                  (self.think_s >= 0, f"--think-time must be >= 0 (got {self.think_s})"),
                  (0 <= self.shared_prefix_tokens < self.input_tokens,
                   f"--shared-prefix-tokens must be >= 0 and below --input-tokens "
                   f"({self.input_tokens}); got {self.shared_prefix_tokens}")]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        check_token_bounds(self.input_tokens, self.output_tokens, self.min_tokens,
                           self.input_stdev, self.output_stdev)
        if self.shared_prefix_tokens and (self.dataset or self.texts):
            raise ConfigError("--shared-prefix-tokens applies to synthetic prompts, "
                              "not to --dataset/--prompts")

    def salted(self) -> "PromptSource":
        """This source with a salt: its own, else a random one chosen now (once per run,
        so two runs never share a prompt, not even in a server's prefix cache)."""
        return self if self.salt is not None else replace(self, salt=secrets.token_hex(3) + "-")

    def prompt(self, index: int) -> Prompt | Session:
        """The prompt of run-wide request ``index`` (0-based), the same in every process:
        its draws come from an RNG seeded with (``seed``, ``index``) and dataset rows from
        a seeded shuffle per pass, so worker processes share nothing but this object.
        ``salt`` None means no salt here (a run picks one first, :meth:`salted`).
        With ``turns`` > 1, ``index`` counts sessions: session ``index`` (a dataset row's
        own turns, or synthetic turns made as prompts ``index·turns + t``)."""
        if self.turns > 1:
            return self._session_at(index)
        return self._prompt_at(index)

    def _session_at(self, index: int) -> Session:
        if self.dataset is not None:
            row = _row_at(self.dataset.rows, self.seed, index, self.replacement)
            rng = self._rng(index)
            return self._session(index, [self._from_row(turn, rng) for turn in row.turns()])
        return self._session(index, [self._prompt_at(index * self.turns + turn)
                                     for turn in range(self.turns)])

    def _rng(self, index: int) -> random.Random | None:
        """Request ``index``'s own RNG, seeded with (``seed``, ``index``); None when
        nothing is drawn (no stdev): seeding costs ~20-50 µs a prompt."""
        if not (self.input_stdev or self.output_stdev):
            return None
        return random.Random(f"{self.seed}/{index}")

    def _prompt_at(self, index: int) -> Prompt:
        rng = self._rng(index)
        if self.dataset is not None:
            return self._from_row(_row_at(self.dataset.rows, self.seed, index,
                                          self.replacement), rng)
        if self.texts:
            return self._from_row(DatasetRow(self.texts[index % len(self.texts)], 0), rng)
        return self._synthetic(index, rng, self.salt or "")

    @property
    def input_tokens_exact(self) -> bool:
        return self.tokenizer is not None

    def __iter__(self) -> Iterator[Prompt | Session]:
        """``prompt(0), prompt(1), ...`` with a salt (a random one per iteration when
        ``salt`` is None): what one process sends."""
        source = self.salted()
        return (source.prompt(index) for index in itertools.count())

    def _session(self, index: int, turns: list[Prompt]) -> Session:
        return Session(index, tuple(turns[:self.turns]), self.think_s, self._count,
                       self.tokenizer is not None)

    # -- synthetic ------------------------------------------------------------------------
    def _synthetic(self, index: int, rng: random.Random | None, salt: str) -> Prompt:
        n_in = draw_length(rng, self.input_tokens, self.input_stdev,
                           low=self.shared_prefix_tokens + 1, high=max_input_tokens())
        n_out = draw_length(rng, self.output_tokens or DEFAULT_OUTPUT_TOKENS, self.output_stdev,
                            high=max_output_tokens())
        prefix = self._prefix(index % self.prefix_groups) if self.shared_prefix_tokens else ""
        unique = n_in - self.shared_prefix_tokens
        if self.tokenizer is None:
            text = prefix + synthetic_text(unique, index, salt)
        else:
            text = (self._quick_exact(prefix, index, salt, n_in)
                     or self._exact(prefix, unique, index, salt, n_in))
        return Prompt(text, n_out, self.min_tokens, input_tokens=n_in,
                      input_tokens_exact=self.tokenizer is not None)

    def _prefix(self, group: int) -> str:
        """The shared start of group ``group``'s prompts, ending in a space."""
        if ("prefix", group) not in self._made:
            salt = f"shared prefix {group} "
            if self.tokenizer is None:
                text = synthetic_text(self.shared_prefix_tokens, group * 11, salt)
            else:
                text = self._cut(synthetic_text(self.shared_prefix_tokens + 8, group * 11, salt),
                                 self.shared_prefix_tokens)
            self._made["prefix", group] = text + " "
        return self._made["prefix", group]

    def _quick_exact(self, prefix: str, index: int, salt: str, total: int) -> str | None:
        """The request's own tag, then cached filler of the remaining length: one encode
        to check instead of cutting fresh text. None when the parts don't add up (a
        merge across a boundary) or there is no room; the caller then cuts."""
        tag = request_tag(index, salt) + " "
        room = total - self.tokenizer.count(prefix + tag)
        if room < 1:
            return None
        if room not in self._made:
            self._made[room] = self.tokenizer.cut(synthetic_text(room + 8, 0, "body "), room) or ""
        body = self._made[room]
        text = prefix + tag + body
        return text if body and self.tokenizer.count(text) == total else None

    def _exact(self, prefix: str, unique: int, index: int, salt: str, total: int) -> str:
        # Filler has more words than tokens are needed (a word is at least one token);
        # the cut keeps the prefix whole and trims the request's own part.
        for attempt in range(8):
            filler = synthetic_text(unique + 8, index + attempt * 1_000_003, salt)
            cut = self.tokenizer.cut(prefix + filler, total)
            if cut is not None:
                return cut
        raise ConfigError(f"--tokenizer {self.tokenizer.source}: cannot make a prompt of "
                          f"exactly {total} tokens with it")

    def _cut(self, text: str, tokens: int) -> str:
        cut = self.tokenizer.cut(text, tokens)
        if cut is None:
            raise ConfigError(f"--tokenizer {self.tokenizer.source}: cannot make a prompt of "
                              f"exactly {tokens} tokens with it")
        return cut

    # -- datasets -------------------------------------------------------------------------
    def _count(self, text: str) -> int:
        return self.tokenizer.count(text) if self.tokenizer else estimate_tokens(text)

    def _from_row(self, row: DatasetRow, rng: random.Random | None) -> Prompt:
        if self.output_tokens is not None:
            mean = self.output_tokens
        elif row.max_tokens is not None:
            mean = row.max_tokens
        elif row.reference:
            mean = self._count(row.reference)
        else:
            mean = DEFAULT_OUTPUT_TOKENS
        contents = [m["content"] for m in row.messages] if row.messages else [row.text]
        return Prompt(row.text, draw_length(rng, mean, self.output_stdev,
                                            high=max_output_tokens()), self.min_tokens,
                      input_tokens=sum(self._count(c) for c in contents),
                      input_tokens_exact=self.tokenizer is not None, messages=row.messages)


class PromptStream:
    """One process's prompts, by run-wide request index, that can be made ahead before a
    level starts.

    Exact-length prompts cost a tokenizer pass each (about 1 ms per 1,000 characters on a
    busy 2-core box, holding the GIL); made ahead, that cost stays out of the level's
    send path and its ``send_lag_ms``. A :class:`PromptSource` is asked by index (so a
    request gets the same prompt as in a multi-worker run); any other iterable (a trace's
    prompts) is taken in order.
    """

    def __init__(self, source) -> None:
        self._make = source.salted().prompt if isinstance(source, PromptSource) else None
        self._items = iter(source) if self._make is None else None
        self._ready: dict[int, Any] = {}  # made ahead, by index
        self._next = 0  # the index after the last one asked for

    def prompt(self, index: int):
        """Request ``index``'s prompt (or multi-turn session; its later turns take
        request ids, not prompts)."""
        self._next = index + 1
        if index in self._ready:
            return self._ready.pop(index)
        return self._make(index) if self._make is not None else next(self._items)

    def prefill(self, count: int, start: int | None = None) -> None:
        """Make sure ``count`` prompts from index ``start`` (default: the next) are ready."""
        start = self._next if start is None else start
        for index in range(start, start + count):
            if index not in self._ready:
                self._ready[index] = (self._make(index) if self._make is not None
                                      else next(self._items))


def prefill_count(load, stop) -> int:
    """Prompts a level will likely take: its request count (plus warm-up), an open loop's
    rate × duration, else a modest 1,000; at most 50,000."""
    expected = stop.requests_for(load)
    if expected is None:
        rate = getattr(load, "rate", None)
        expected = math.ceil(rate * stop.duration_s) if rate else 1000
    return min(50_000, expected + stop.warmup)


def _row_at(rows: tuple[DatasetRow, ...], seed: int, index: int,
            replacement: bool) -> DatasetRow:
    """Row of request ``index``: an independent seeded draw, or its place in a seeded
    shuffle of its pass (pass ``index // len(rows)``)."""
    if replacement:
        return rows[random.Random(f"{seed}/row/{index}").randrange(len(rows))]
    return rows[_pass_order(len(rows), seed, index // len(rows))[index % len(rows)]]


@functools.lru_cache(maxsize=4)
def _pass_order(n: int, seed: int, pass_index: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"{seed}/pass/{pass_index}").shuffle(order)
    return tuple(order)


def load_prompt_file(path: str | Path) -> tuple[str, ...]:
    """JSONL, one prompt a line: ``{"prompt": "..."}`` / ``{"text": ...}`` or a bare JSON string."""
    return tuple(row.text for row in load_dataset(path, "jsonl").rows)
