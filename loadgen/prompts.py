"""Where prompts come from: synthetic text of a given length, or a JSONL file."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

from .errors import ConfigError
from .record import Prompt

# A fixed vocabulary of common one-token English words: synthetic prompts are
# deterministic and come out close to one token per word on common tokenizers.
_WORDS = ("the of and to in is was for on that with as by at from his her which an be this "
          "are were had have not but all they one more said time can so what there if would "
          "about up out them other some could into than then only its over also two new first "
          "after these well any may very way where much most through back just before").split()


def synthetic_text(tokens: int, index: int = 0) -> str:
    """About ``tokens`` tokens of deterministic filler; ``index`` varies the start so
    prompts differ (no accidental prefix-cache hits across requests)."""
    words = [f"request {index}:"]
    n = len(_WORDS)
    words += (_WORDS[(index * 7 + i) % n] for i in range(max(tokens - 3, 1)))
    return " ".join(words)


@dataclass(frozen=True)
class PromptSource:
    """An endless, deterministic stream of prompts for a level."""

    input_tokens: int = 128
    output_tokens: int = 128
    min_tokens: int | None = None
    texts: tuple[str, ...] = ()  # from a file; empty = synthetic

    def prompt(self, index: int) -> Prompt:
        """The prompt of request ``index`` (0-based, run-wide): the same in every process."""
        if self.texts:
            return Prompt(self.texts[index % len(self.texts)], self.output_tokens,
                          self.min_tokens)
        return Prompt(synthetic_text(self.input_tokens, index), self.output_tokens,
                      self.min_tokens, input_tokens=self.input_tokens)

    def __iter__(self) -> Iterator[Prompt]:
        return map(self.prompt, itertools.count())


def load_prompt_file(path: str | Path) -> tuple[str, ...]:
    """JSONL, one prompt a line: ``{"prompt": "..."}`` / ``{"text": ...}`` or a bare JSON string."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file {path}: {exc.strerror}") from None
    texts = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{path}:{lineno}: not valid JSON; each line must be "
                              '{"prompt": "..."} or a JSON string') from None
        text = obj if isinstance(obj, str) else (
            obj.get("prompt") or obj.get("text") if isinstance(obj, dict) else None)
        if not isinstance(text, str) or not text:
            raise ConfigError(f'{path}:{lineno}: expected {{"prompt": "..."}} or a JSON string')
        texts.append(text)
    if not texts:
        raise ConfigError(f"{path}: no prompts found (one JSON object per line)")
    return tuple(texts)
