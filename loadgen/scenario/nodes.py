"""Typed readers over composed YAML nodes that collect *every* problem, with line numbers.

``yaml.compose`` keeps each key's and value's position (``node.start_mark``); the
readers below check a node against a declared shape and, instead of stopping at the
first mistake, append a :class:`Problem` and go on. A reader returns the value, or
:data:`INVALID` when the node could not be read (the caller then skips it).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..bounds import text_problem

INVALID = object()  # "this value had a problem; it was reported"
Check = Callable[[Any], "str | None"]  # a further check on a well-typed value


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based
    message: str

    def format(self, file: str) -> str:
        return f"{file}:{self.line}: {self.message}"


def line_of(node: Node) -> int:
    return node.start_mark.line + 1


class Context:
    """The loader (to build Python values from scalar nodes) and the problems found."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.problems: list[Problem] = []
        self.substituted: dict[int, str] = {}  # id(node) -> its text before ${...} substitution
        self.unresolved: set[int] = set()  # nodes with a ${PARAM} that is not set
        self.warnings: list[Problem] = []

    def problem(self, node: Node, message: str) -> None:
        if id(node) in self.substituted:  # say where a bad value came from
            message += f" (from {self.substituted[id(node)]!r})"
        self.problems.append(Problem(line_of(node), message))

    def scalar(self, node: Node) -> Any:
        return self.loader.construct_object(node, deep=True)


def _describe(value: Any, node: Node) -> str:
    """How a wrong value looks to the user: 'a list', 'the number 8', 'nothing'."""
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, MappingNode):
        return "a mapping"
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return f"the text {value!r}"


# --------------------------------------------------------------------------- scalars


@dataclass(frozen=True)
class Scalar:
    """A scalar of one Python type; ``check`` runs on a value of the right type."""

    kind: str  # "text", "integer", "number", "boolean"
    check: Check | None = None
    doc: str = ""

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        if id(node) in ctx.unresolved:
            # The missing parameter was reported (or, when lenient, warned about); the
            # literal "${NAME}" text stands in for text values, other kinds are left out.
            return node.value if self.kind == "text" else INVALID
        value = ctx.scalar(node) if isinstance(node, ScalarNode) else INVALID
        if value is INVALID or not self._type_ok(value):
            hint = ""
            if self.kind == "text" and isinstance(node, ScalarNode) and value is not None:
                hint = f' (quote it: "{node.value}")'
            ctx.problem(node, f"{where} must be {self._article()}, got "
                              f"{_describe(value, node)}{hint}")
            return INVALID
        if self.kind == "number":
            value = float(value)
        if self.kind == "text" and (message := text_problem(value)):  # a 10 MB path
            ctx.problem(node, f"{where} {message}")
            return INVALID
        if self.check is not None and (message := self.check(value)):
            ctx.problem(node, f"{where} {message}")
            return INVALID
        return value

    def _type_ok(self, value: Any) -> bool:
        if self.kind == "boolean":
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if self.kind == "integer":
            return isinstance(value, int)
        if self.kind == "number":
            return isinstance(value, (int, float))
        return isinstance(value, str)

    def _article(self) -> str:
        return {"text": "text", "integer": "an integer", "number": "a number",
                "boolean": "true or false"}[self.kind]


def Text(check: Check | None = None, doc: str = "") -> Scalar:  # noqa: N802 - reads as a type
    return Scalar("text", check, doc)


def Integer(check: Check | None = None, doc: str = "") -> Scalar:  # noqa: N802
    return Scalar("integer", check, doc)


def Number(check: Check | None = None, doc: str = "") -> Scalar:  # noqa: N802
    return Scalar("number", check, doc)


def Boolean(doc: str = "") -> Scalar:  # noqa: N802
    return Scalar("boolean", None, doc)


@dataclass(frozen=True)
class WorkerCount:
    """``auto`` or a whole number >= 1, as ``--workers`` takes it."""

    doc: str = ""

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        value = ctx.scalar(node) if isinstance(node, ScalarNode) else INVALID
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                               and value >= 1):
            return value
        ctx.problem(node, f"{where} must be a whole number >= 1 or auto, got "
                          f"{_describe(None if value is INVALID else value, node)}")
        return INVALID


# --------------------------------------------------------------------------- collections


def _read_items(ctx: Context, node: Node, where: str, item: Any, example: str) -> Any:
    """A non-empty list read item by item with ``item`` (a bare value is a one-item list)."""
    items = node.value if isinstance(node, SequenceNode) else [node]
    if not items:
        ctx.problem(node, f"{where} is empty: give at least one value{example}")
        return INVALID
    values = [item.read(ctx, value, f"each value of {where}") for value in items]
    return INVALID if INVALID in values else tuple(values)


@dataclass(frozen=True)
class IntegerList:
    """A non-empty list of integers (a bare integer is read as a one-item list)."""

    item_check: Check | None = None

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        return _read_items(ctx, node, where, Integer(self.item_check), ", e.g. [1, 4, 16]")


@dataclass(frozen=True)
class TextList:
    """A non-empty list of texts (a bare text is read as a one-item list)."""

    item_check: Check | None = None

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        return _read_items(ctx, node, where, Text(self.item_check), "")


@dataclass(frozen=True)
class Command:
    """A program and its arguments: a list of texts, or one text split as a shell would
    split it (quotes respected, nothing expanded: no variables, no globs)."""

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        import shlex

        if isinstance(node, ScalarNode):
            value = ctx.scalar(node)
            if not isinstance(value, str) or not value.strip():
                ctx.problem(node, f"{where} must be a command: a list such as [vllm, serve, "
                                  f"'{{model}}'] or a text, got {_describe(value, node)}")
                return INVALID
            if message := text_problem(value):
                ctx.problem(node, f"{where} {message}")
                return INVALID
            try:
                return tuple(shlex.split(value))
            except ValueError as exc:
                ctx.problem(node, f"{where}: cannot split {value!r} into arguments ({exc})")
                return INVALID
        if not isinstance(node, SequenceNode) or not node.value:
            ctx.problem(node, f"{where} must be a non-empty list of arguments")
            return INVALID
        items = []
        for item in node.value:
            value = ctx.scalar(item) if isinstance(item, ScalarNode) else INVALID
            if isinstance(value, bool) or value is None or value is INVALID \
                    or not isinstance(value, (str, int, float)):
                ctx.problem(item, f"each argument of {where} must be a single text or number, "
                                  f"got {_describe(None if value is INVALID else value, item)}")
                return INVALID
            if message := text_problem(str(value)):
                ctx.problem(item, f"an argument of {where} {message}")
                return INVALID
            items.append(item.value if isinstance(value, (int, float)) else value)
        return tuple(items)


@dataclass(frozen=True)
class TextMap:
    """``KEY: value`` pairs whose values become text (environment variables, tags)."""

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        if not isinstance(node, MappingNode):
            ctx.problem(node, f"{where} must be a mapping of NAME: value, got "
                              f"{_describe(ctx.scalar(node) if isinstance(node, ScalarNode) else None, node)}")
            return INVALID
        out: dict[str, str] = {}
        for key_node, value_node in mapping_pairs(ctx, node):
            key = ctx.scalar(key_node) if isinstance(key_node, ScalarNode) else None
            value = ctx.scalar(value_node) if isinstance(value_node, ScalarNode) else INVALID
            if id(value_node) in ctx.unresolved:
                continue
            if not isinstance(key, str):
                ctx.problem(key_node, f"{_at(where)}keys must be names")
            elif value is INVALID or value is None:
                ctx.problem(value_node, f"{where}.{key} must be a single value")
            else:
                out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


@dataclass(frozen=True)
class Section:
    """A mapping with known keys. Unknown keys get a did-you-mean; required keys that are
    missing are reported at the mapping's first line."""

    fields: dict[str, Any]  # key -> reader
    required: tuple[str, ...] = ()
    shorthand: str | None = None  # a bare scalar means {shorthand: scalar}

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        if self.shorthand and isinstance(node, ScalarNode) and ctx.scalar(node) is not None:
            return Block({self.shorthand: self.fields[self.shorthand].read(ctx, node, where)},
                         {self.shorthand: line_of(node)}, line_of(node))
        if not isinstance(node, MappingNode):
            value = ctx.scalar(node) if isinstance(node, ScalarNode) else None
            ctx.problem(node, f"{where or 'the file'} must be a mapping of settings, got "
                              f"{_describe(value, node)}")
            return INVALID
        block = Block({}, {}, line_of(node))
        for key_node, value_node in mapping_pairs(ctx, node):
            key = ctx.scalar(key_node) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                ctx.problem(key_node, f"{_at(where)}keys must be names, got {_describe(key, key_node)}")
                continue
            if key in block.lines:
                ctx.problem(key_node, f"{_at(where)}duplicate key {key!r} (first given on line "
                                      f"{block.lines[key]})")
                continue
            block.lines[key] = line_of(key_node)
            reader = self.fields.get(key)
            if reader is None:
                ctx.problem(key_node, f"{_at(where)}unknown key {key!r}{_did_you_mean(key, self.fields)}")
                continue
            if isinstance(value_node, ScalarNode) and ctx.scalar(value_node) is None \
                    and key not in self.required:
                continue  # "key:" with no value on an optional key means "default"
            value = reader.read(ctx, value_node, _join(where, key))
            if value is not INVALID:
                block.values[key] = value
        for key in self.required:
            if key not in block.lines:
                ctx.problem(node, f"{_at(where)}missing required key {key!r}")
        return block


@dataclass(frozen=True)
class ListOf:
    """A non-empty list whose items share one reader."""

    item: Any
    noun: str = "item"

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        if not isinstance(node, SequenceNode):
            ctx.problem(node, f"{where} must be a list of {self.noun}s")
            return INVALID
        if not node.value:
            ctx.problem(node, f"{where} is empty: give at least one {self.noun}")
            return INVALID
        items = [self.item.read(ctx, item, f"{where}[{i}]") for i, item in enumerate(node.value)]
        return [item for item in items if item is not INVALID]


@dataclass(frozen=True)
class MapOf:
    """A mapping from free-form names (e.g. checkpoints) to one reader."""

    item: Any

    def read(self, ctx: Context, node: Node, where: str) -> Any:
        if not isinstance(node, MappingNode):
            ctx.problem(node, f"{where} must be a mapping of NAME: settings")
            return INVALID
        block = Block({}, {}, line_of(node))
        for key_node, value_node in mapping_pairs(ctx, node):
            key = ctx.scalar(key_node) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                ctx.problem(key_node, f"{_at(where)}keys must be names")
                continue
            if key in block.lines:
                ctx.problem(key_node, f"{_at(where)}duplicate key {key!r}")
                continue
            block.lines[key] = line_of(key_node)
            value = self.item.read(ctx, value_node, _join(where, key))
            if value is not INVALID:
                block.values[key] = value
        return block


@dataclass
class Block:
    """A read mapping: its values, the line of each key, and its own first line."""

    values: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)
    line: int = 1

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def line_for(self, key: str) -> int:
        return self.lines.get(key, self.line)


_MERGE = "tag:yaml.org,2002:merge"


def mapping_pairs(ctx: Context, node: MappingNode) -> list[tuple[Node, Node]]:
    """The (key, value) pairs of a mapping with YAML merge keys (``<<: *defaults``)
    applied: the mapping's own keys first and winning, then merged keys not given.
    Rewrites ``node`` in place, so a node reached twice through an alias is read the
    same way both times."""
    if not any(key.tag == _MERGE for key, _ in node.value):
        return node.value
    own = [(k, v) for k, v in node.value if k.tag != _MERGE]
    try:
        ctx.loader.flatten_mapping(node)  # node.value becomes merged pairs + own pairs
    except yaml.MarkedYAMLError as exc:
        ctx.problem(node, f"bad merge key (<<): {exc.problem}")
        node.value = own
        return own
    own_ids = {id(k) for k, _ in own}
    seen = {k.value for k, _ in own if isinstance(k, ScalarNode)}
    merged = []
    for key, value in node.value:
        if id(key) in own_ids or (isinstance(key, ScalarNode) and key.value in seen):
            continue
        seen.add(key.value)
        merged.append((key, value))
    node.value = own + merged
    return node.value


def _at(where: str) -> str:
    """Message prefix naming a mapping; nothing for the file's top level."""
    return f"{where}: " if where else ""


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _did_you_mean(key: str, known: dict[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known keys: {', '.join(sorted(known))}"
