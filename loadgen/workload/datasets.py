"""Prompt datasets: ShareGPT JSON, JSONL (``prompt`` or OpenAI ``messages``) and plain text.

Every row keeps the line it starts on, so a bad row is reported as ``FILE:LINE: ...``
(one line, as for scenario files). ShareGPT conversations without a user turn followed
by an answer are skipped and counted, as vLLM's benchmark skips them; anything else
malformed is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..bounds import input_tokens_problem, output_tokens_problem
from ..errors import ConfigError
from .tokenizer import estimate_tokens

FORMATS = ("auto", "sharegpt", "jsonl", "text")
_BY_SUFFIX = {".json": "sharegpt", ".jsonl": "jsonl", ".txt": "text"}
_USER_ROLES = ("human", "user")
_ANSWER_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing")


@dataclass(frozen=True)
class DatasetRow:
    """One prompt of a dataset. ``text`` is the (last) user message; ``messages`` the
    whole chat when the row gave one; ``reference`` the dataset's own answer, whose
    length becomes the output length when none is asked for."""

    text: str
    line: int
    messages: tuple[dict, ...] | None = None
    max_tokens: int | None = None
    reference: str | None = None
    # ShareGPT: the conversation's later (user turn, answer) pairs, for multi-turn sessions.
    later_turns: tuple[tuple[str, str], ...] = ()

    def turns(self) -> list["DatasetRow"]:
        """This row as a session's turns: itself, then one row per later user turn."""
        return [self, *(DatasetRow(text, self.line, reference=answer)
                        for text, answer in self.later_turns)]


@dataclass(frozen=True)
class Dataset:
    path: str
    format: str
    rows: tuple[DatasetRow, ...]
    skipped: int = 0  # rows without a usable prompt (ShareGPT only)


def load_dataset(path: str | Path, fmt: str = "auto") -> Dataset:
    """Read and validate a dataset; ``fmt`` one of :data:`FORMATS`."""
    path = Path(path)
    if fmt not in FORMATS:
        raise ConfigError(f"--dataset-format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read dataset {path}: {exc.strerror}") from None
    try:
        data = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _error(path, line, f"not UTF-8 text (byte {exc.start}: "
                     f"{raw[exc.start:exc.start + 1]!r}); save the file as UTF-8") from None
    if fmt == "auto":
        fmt = detect_format(path, data)
    rows, skipped = _READERS[fmt](path, data)
    for row in rows:
        _check_row_bounds(path, row)
    if not rows:
        raise ConfigError(f"{path}: no prompts found (read as {fmt}; "
                          "name the format with --dataset-format if that is wrong)")
    return Dataset(str(path), fmt, tuple(rows), skipped)


def _check_row_bounds(path: Path, row: DatasetRow) -> None:
    """A row's prompt (estimated at 4 characters a token) and its max_tokens within
    :mod:`loadgen.bounds`: a 10 MB prompt is refused before any load, with its line."""
    contents = [m["content"] for m in row.messages] if row.messages else [row.text]
    message = input_tokens_problem(sum(map(estimate_tokens, contents)), "the prompt")
    if message is None and row.max_tokens is not None:
        message = output_tokens_problem(row.max_tokens, "max_tokens")
    if message:
        raise _error(path, row.line, message)


def detect_format(path: Path, data: str) -> str:
    """By suffix (.json, .jsonl, .txt), else by the first character: ``[`` ShareGPT,
    ``{`` or ``"`` JSONL, anything else text."""
    if path.suffix.lower() in _BY_SUFFIX:
        return _BY_SUFFIX[path.suffix.lower()]
    start = data.lstrip()[:1]
    return {"[": "sharegpt", "{": "jsonl", '"': "jsonl"}.get(start, "text")


def _error(path: Path, line: int, message: str) -> ConfigError:
    return ConfigError(f"{path}:{line}: {message}")


# --------------------------------------------------------------------------- plain text


def _read_text(path: Path, data: str) -> tuple[list[DatasetRow], int]:
    return [DatasetRow(line.strip(), lineno)
            for lineno, line in enumerate(data.splitlines(), 1) if line.strip()], 0


# --------------------------------------------------------------------------- JSONL


def _read_jsonl(path: Path, data: str) -> tuple[list[DatasetRow], int]:
    rows = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _error(path, lineno, 'not valid JSON; each line must be {"prompt": "..."}, '
                         '{"messages": [...]} or a JSON string') from None
        rows.append(_jsonl_row(path, lineno, obj))
    return rows, 0


def _jsonl_row(path: Path, lineno: int, obj) -> DatasetRow:
    if isinstance(obj, str) and obj:
        return DatasetRow(obj, lineno)
    if not isinstance(obj, dict):
        raise _error(path, lineno, 'expected {"prompt": "..."}, {"messages": [...]} '
                     "or a JSON string")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise _error(path, lineno, f"max_tokens must be a positive integer (got {max_tokens!r})")
    if "messages" in obj:
        messages = _messages(path, lineno, obj["messages"])
        users = [m["content"] for m in messages if m["role"] == "user"]
        return DatasetRow(users[-1] if users else messages[-1]["content"], lineno,
                          messages=messages, max_tokens=max_tokens)
    text = obj.get("prompt", obj.get("text"))
    if not isinstance(text, str) or not text:
        raise _error(path, lineno, 'needs a non-empty "prompt" string or a "messages" list')
    return DatasetRow(text, lineno, max_tokens=max_tokens)


def _messages(path: Path, lineno: int, messages) -> tuple[dict, ...]:
    if not isinstance(messages, list) or not messages:
        raise _error(path, lineno, '"messages" must be a non-empty list of '
                     '{"role": ..., "content": "..."}')
    _check_items(path, lineno, messages, "messages", ("role", "content"))
    return tuple({"role": m["role"], "content": m["content"]} for m in messages)


def _check_items(path: Path, lineno: int, items: list, name: str, keys: tuple[str, str]) -> None:
    """Every item an object with string values under both ``keys``, else FILE:LINE."""
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and all(isinstance(item.get(k), str) for k in keys)):
            raise _error(path, lineno, f'{name}[{i}] must be {{"{keys[0]}": "...", '
                         f'"{keys[1]}": "..."}} with string values')


# --------------------------------------------------------------------------- ShareGPT


def _read_sharegpt(path: Path, data: str) -> tuple[list[DatasetRow], int]:
    rows, skipped = [], 0
    for lineno, entry in _array_items(path, data):
        row = _sharegpt_row(path, lineno, entry)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    return rows, skipped


def _array_items(path: Path, data: str):
    """``(line, item)`` for each item of a top-level JSON array, parsed one item at a
    time so every item knows the line it starts on."""
    decoder = json.JSONDecoder()
    pos, line, counted = _skip_space(data, 0), 1, 0

    def line_at(index: int) -> int:
        nonlocal line, counted
        line += data.count("\n", counted, index)
        counted = index
        return line

    if data[pos:pos + 1] != "[":
        raise _error(path, line_at(pos), "a ShareGPT file is a JSON list of "
                     '{"conversations": [...]} objects')
    pos = _skip_space(data, pos + 1)
    if data[pos:pos + 1] == "]":
        return
    while True:
        try:
            item, end = decoder.raw_decode(data, pos)
        except json.JSONDecodeError as exc:
            raise _error(path, line_at(exc.pos), f"not valid JSON ({exc.msg})") from None
        yield line_at(pos), item
        pos = _skip_space(data, end)
        if data[pos:pos + 1] == "]":
            return
        if data[pos:pos + 1] != ",":
            raise _error(path, line_at(pos), "not valid JSON (expected ',' or ']')")
        pos = _skip_space(data, pos + 1)


def _skip_space(data: str, pos: int) -> int:
    while pos < len(data) and data[pos] in " \t\r\n":
        pos += 1
    return pos


def _sharegpt_row(path: Path, lineno: int, entry) -> DatasetRow | None:
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list):
        raise _error(path, lineno, 'each entry needs a "conversations" list '
                     '([{"from": "human", "value": "..."}, ...])')
    _check_items(path, lineno, turns, "conversations", ("from", "value"))
    pairs = [(turn["value"], answer["value"]) for turn, answer in zip(turns, turns[1:])
             if turn["from"] in _USER_ROLES and turn["value"] and answer["from"] in _ANSWER_ROLES]
    if not pairs:
        return None
    (text, reference), *later = pairs
    return DatasetRow(text, lineno, reference=reference, later_turns=tuple(later))


_READERS = {"sharegpt": _read_sharegpt, "jsonl": _read_jsonl, "text": _read_text}
