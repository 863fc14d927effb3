"""Every tool's arguments, checked against its input schema before the tool runs.

One rule for every tool, whatever its parameters (the server applies it to each
``tools/call``, see :mod:`.server`): an argument the tool does not take is refused with
one line naming the ones it takes (a misspelt ``slo`` must not be dropped silently);
strings, lists and maps have length caps; numbers are finite and within the schema's
bounds; types and choices are the schema's. A violation is one line, never a traceback
or a validation dump. No SDK import here: the schema is plain JSON Schema.
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any

from ..errors import one_line

TEXT_CHARS = 2048  # a string without its own maxLength: a target, a model id, a name
PATH_CHARS = 4096  # parameters that take a path declare this maxLength
MAX_ITEMS = 100  # a list or map without its own maxItems
MAX_INT = 2**63 - 1  # JSON's interoperable integers; no bound of loadgen's is larger
_JSON_TEXT_CHARS = MAX_ITEMS * PATH_CHARS  # a list sent as JSON text (some clients do)
_SHOWN_NAMES = 12

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list, tuple), "object": (dict,), "null": (type(None),),
}


def check_arguments(tool: str, schema: dict, arguments: dict) -> str | None:
    """The one-line problem with ``arguments`` of ``tool``, or None when they are fine."""
    schema = _inline(schema, schema.get("$defs") or {})
    properties: dict = schema.get("properties") or {}
    unknown = [name for name in arguments if name not in properties]
    if unknown:
        names = ", ".join(one_line(name, 40) for name in unknown[:_SHOWN_NAMES])
        takes = ", ".join(properties) or "no arguments"
        plural = "s" if len(unknown) > 1 else ""
        return f"{tool}: unknown argument{plural} {names}; it takes: {takes}"
    missing = [name for name in schema.get("required", ()) if name not in arguments]
    if missing:
        return f"{tool}: missing required argument {', '.join(missing)}"
    for name, value in arguments.items():
        problem = _check(name, value, properties[name])
        if problem:
            return f"{tool}: {problem}"
    return None


def _inline(schema: Any, defs: dict, depth: int = 0) -> Any:
    """``schema`` with each ``{"$ref": "#/$defs/NAME"}`` replaced by its definition (a
    parameter that is a model); a self-referencing model is cut off after a few levels."""
    if isinstance(schema, list):
        return [_inline(item, defs, depth) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        return _inline(target, defs, depth + 1) if depth < 8 else {}
    return {key: _inline(value, defs, depth) for key, value in schema.items() if key != "$defs"}


def _branches(schema: dict) -> list[dict]:
    """The alternatives of a schema (``anyOf`` of an optional parameter), else itself."""
    return list(schema.get("anyOf") or schema.get("oneOf") or [schema])


def _type_names(branches: list[dict]) -> list[str]:
    names: list[str] = []
    for branch in branches:
        kind = branch.get("type")
        names.extend(kind if isinstance(kind, list) else [kind] if kind else [])
    return names


def _fits(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False  # JSON true is not the number 1
    if kind == "integer" and isinstance(value, float):
        return value.is_integer() and math.isfinite(value)
    return isinstance(value, _TYPES.get(kind, (object,)))


def _check(where: str, value: Any, schema: dict) -> str | None:
    branches = _branches(schema)
    kinds = _type_names(branches)
    if isinstance(value, str) and kinds and "string" not in kinds:
        if len(value) > _JSON_TEXT_CHARS:
            return f"{where} is {len(value)} characters long; the limit is {_JSON_TEXT_CHARS}"
        try:  # the SDK accepts a list or map sent as JSON text; check what it will see
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, (list, dict)):
            value = parsed
    if kinds and not any(_fits(value, kind) for kind in kinds):
        wanted = " or ".join(_plain(kind) for kind in kinds)
        return f"{where} must be {wanted} (got {_shown(value)})"
    branch = next((b for b in branches if not b.get("type") or _fits(value, b["type"])), {})
    if isinstance(value, str):
        return _check_text(where, value, branch)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _check_number(where, value, branch)
    if isinstance(value, (list, tuple)):
        return _check_list(where, value, branch)
    if isinstance(value, dict):
        return _check_map(where, value, branch)
    return None


def _check_text(where: str, value: str, schema: dict) -> str | None:
    limit = schema.get("maxLength", TEXT_CHARS)
    if len(value) > limit:
        return f"{where} is {len(value)} characters long; the limit is {limit}"
    if "\0" in value:
        return f"{where} contains a NUL character"
    choices = schema.get("enum")
    if choices is not None and value not in choices:
        return f"{where} must be one of {', '.join(map(str, choices))} (got {_shown(value)})"
    if len(value) < schema.get("minLength", 0):
        return f"{where} must not be empty"
    return None


def _check_number(where: str, value: float, schema: dict) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} must be a finite number (got {value})"
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"{where} is out of range (at most {MAX_INT})"
    bounds = (("minimum", ">=", operator.ge), ("exclusiveMinimum", ">", operator.gt),
              ("maximum", "<=", operator.le), ("exclusiveMaximum", "<", operator.lt))
    for key, word, holds in bounds:
        if key in schema and not holds(value, schema[key]):
            return f"{where} must be {word} {schema[key]:g} (got {value:g})"
    return None


def _check_list(where: str, value: list, schema: dict) -> str | None:
    limit = schema.get("maxItems", MAX_ITEMS)
    if len(value) > limit:
        return f"{where} has {len(value)} entries; the limit is {limit}"
    if len(value) < schema.get("minItems", 0):
        return f"{where} needs at least {schema['minItems']} entries (got {len(value)})"
    items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
    for index, item in enumerate(value):
        problem = _check(f"{where}[{index}]", item, items)
        if problem:
            return problem
    return None


def _check_map(where: str, value: dict, schema: dict) -> str | None:
    if len(value) > MAX_ITEMS:
        return f"{where} has {len(value)} entries; the limit is {MAX_ITEMS}"
    if "properties" in schema:  # a model: its fields, as for the tool's own arguments
        return check_arguments(where, schema, value)
    values = schema.get("additionalProperties")
    values = values if isinstance(values, dict) else {}
    for key, item in value.items():
        problem = (_check_text(f"{where} key", key, {}) if isinstance(key, str) else None
                   ) or _check(f"{where}[{one_line(key, 40)!r}]", item, values)
        if problem:
            return problem
    return None


def _plain(kind: str) -> str:
    return {"string": "a string", "integer": "an integer", "number": "a number",
            "boolean": "true or false", "array": "a list", "object": "a map",
            "null": "null"}.get(kind, kind)


def _shown(value: Any) -> str:
    return one_line(repr(value), 60)
