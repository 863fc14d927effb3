"""How a run option is declared: once, as a dataclass field carrying its :class:`Option`.

    ignore_eos: bool = option(True, "Requests", "vLLM: generate exactly --output-tokens.",
                              negatable=True)

The field's name is the option's public name (API keyword, MCP argument, scenario key;
``key=`` when the dataclass's own name would be ambiguous once flattened), its default is
the default everywhere, its annotation its type. The front doors are generated from these
fields: the CLI's click options (:mod:`loadgen.cli.options`), MCP ``start_run``'s input
schema (:mod:`loadgen.mcp.loadrun`), the scenario ``request:`` section
(:mod:`loadgen.scenario.schema`) and :func:`loadgen.api.sweep`'s keywords; the run
description's parts and their order are :data:`loadgen.runconfig.RUN_PARTS`.

Nothing here imports click or pydantic: front doors turn an :class:`OptionField` into
their own declaration.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Callable, Union

from .errors import ConfigError

# CLI help headings, in --help order (tests/test_cli_help.py checks the order).
GROUPS = ("Target", "Load (per level)", "Requests", "Workload (prompts, datasets, traces)",
          "Timeouts (per request)", "SageMaker (sagemaker:// targets only)",
          "Load generator processes", "Measurement and output")


@dataclass(frozen=True)
class Option:
    """What a front door needs to offer one field as an option."""

    group: str  # one of GROUPS
    help: str
    metavar: str | None = None  # the unit: S, TOKENS, REQ/S, ... (help shows it)
    choices: tuple[str, ...] = ()
    low: float | None = None  # bounds: value >= low (> low when low_open)
    low_open: bool = False
    high: float | None = None  # value <= high
    none_means: str | None = None  # what a None default does, for --help's [default: ...]
    flag: str | None = None  # CLI flag; default "--" + key with dashes
    key: str | None = None  # public name when not the field's own
    item: type | None = None  # a list option: its items' type (comma list on the CLI)
    convert: Callable[[Any], Any] | None = None  # public value -> field value
    negatable: bool = False  # a bool as --x/--no-x (else a flag that turns it on)
    path: str | None = None  # "file" or "dir": the CLI checks what kind of path it is
    sweep_only: bool = False  # several levels: `loadgen run` does not offer it
    hint: str = ""  # what to do instead, after an out-of-bounds error
    check: Callable[[Any], str | None] | None = None  # a further bound: why not, or None


def option(default: Any, group: str, help: str, **kwargs: Any) -> Any:
    """A dataclass field with ``default`` declared as a run option (see :class:`Option`)."""
    if group not in GROUPS:
        raise ValueError(f"unknown option group {group!r}")
    return dataclasses.field(default=default, metadata={"option": Option(group, help, **kwargs)})


@dataclass(frozen=True)
class OptionField:
    """One declared option of one part of the run description."""

    part: str  # which part holds it ("options", "options.timeouts", "stop", ...)
    owner: type  # the dataclass declaring it
    name: str  # the dataclass field's name
    type: Any  # its annotation, resolved
    default: Any
    spec: Option

    @property
    def key(self) -> str:
        return self.spec.key or self.name

    @property
    def flag(self) -> str:
        return self.spec.flag or "--" + self.key.replace("_", "-")

    @property
    def base_type(self) -> Any:
        """The annotation without ``| None``: int, float, str, bool, or a tuple/Union."""
        args = [a for a in typing.get_args(self.type) if a is not type(None)]
        if typing.get_origin(self.type) is Union or type(self.type).__name__ == "UnionType":
            return args[0] if len(args) == 1 else self.type
        return self.type

    @property
    def optional(self) -> bool:
        return type(None) in typing.get_args(self.type)

    def public_default(self) -> Any:
        """The default as a front door shows it (lists for tuples, texts for parsed values)."""
        if isinstance(self.default, tuple):
            return [getattr(v, "text", v) for v in self.default]
        return self.default

    def value(self, given: Any, name: str | None = None) -> Any:
        """``given`` (a public value: API keyword, MCP argument, scenario or CLI value) as
        the field's value, its bounds and choices checked; a one-line error says ``name``
        (default: the key; the CLI passes the flag)."""
        if given is None:
            return None if self.optional or self.default is None else self.default
        checked = dataclasses.replace(self, spec=dataclasses.replace(self.spec,
                                                                     key=name or self.key))
        if self.spec.item is not None:
            items = list(given) if isinstance(given, (list, tuple)) else [given]
            return tuple(checked._one(item) for item in items)
        return checked._one(given)

    def _one(self, given: Any) -> Any:
        if self.spec.convert is not None:
            given = self.spec.convert(given)
        else:
            given = self._typed(given)
        if self.spec.choices and given not in self.spec.choices:
            raise ConfigError(f"{self.key} must be one of {', '.join(self.spec.choices)} "
                              f"(got {given!r})")
        if isinstance(given, (int, float)) and not isinstance(given, bool):
            self._check_bounds(given)
        if self.spec.check is not None and (problem := self.spec.check(given)):
            raise ConfigError(f"{self.key} {problem}")
        return given

    def _typed(self, given: Any) -> Any:
        want = self.spec.item or self.base_type
        if want is bool:
            if not isinstance(given, bool):
                raise ConfigError(f"{self.key} must be true or false (got {given!r})")
            return given
        if want is int:
            if isinstance(given, bool) or not isinstance(given, int):
                raise ConfigError(f"{self.key} must be a whole number (got {given!r})")
            return given
        if want is float:
            if isinstance(given, bool) or not isinstance(given, (int, float)):
                raise ConfigError(f"{self.key} must be a number (got {given!r})")
            return float(given)
        if want is str and not isinstance(given, str):
            raise ConfigError(f"{self.key} must be text (got {given!r})")
        return given

    def _check_bounds(self, value: float) -> None:
        spec = self.spec
        hint = f"; {spec.hint}" if spec.hint else ""
        if not math.isfinite(value):
            raise ConfigError(f"{self.key} must be a finite number (got {value!r}){hint}")
        if spec.low is not None and (value < spec.low or (spec.low_open and value == spec.low)):
            raise ConfigError(f"{self.key} must be {'>' if spec.low_open else '>='} "
                              f"{spec.low:g} (got {value:g}){hint}")
        if spec.high is not None and value > spec.high:
            raise ConfigError(f"{self.key} must be <= {spec.high:g} (got {value:g}){hint}")


def option_fields(part: str, cls: type) -> list[OptionField]:
    """The declared options of dataclass ``cls`` (fields without an :class:`Option` are
    internal: not offered by any front door)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("option")
        if spec is not None:
            out.append(OptionField(part, cls, f.name, hints[f.name], f.default, spec))
    return out


def default(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls``."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{cls.__name__}.{name} has no default")
