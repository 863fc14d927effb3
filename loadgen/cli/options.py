"""The options of ``loadgen run`` and ``loadgen sweep``, generated from the run description.

Every run option is a dataclass field declared once (:func:`loadgen.option.option`, listed
by :func:`loadgen.runconfig.run_options`); this module turns each into a click option
under its group's cloup heading (tests/test_cli_help.py checks every option has one), with
its unit as metavar and its default shown. Only ``--out`` and ``--quiet`` are the CLI's
own. ``run`` measures one level: it offers the level lists as one value and leaves out
the options only ``sweep`` takes (a profile).
"""

from __future__ import annotations

from typing import Any, Callable

import click
import cloup

from ..option import GROUPS, OptionField
from ..runconfig import run_options

ONE_LEVEL, LEVELS = "run", "sweep"
# sweep's own default levels (run measures one level: concurrency 1).
SWEEP_CONCURRENCY = (1, 4, 16)


def comma_list(field: OptionField) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback reading "1,4,16" as numbers of the field's item type; an empty
    item ("1,,4") is an error, not skipped."""
    kind = field.spec.item

    def parse(ctx: click.Context, param: click.Parameter, text: str | None) -> Any:
        if text is None:
            return None
        parts = [part.strip() for part in text.split(",")]
        if any(not part for part in parts):
            raise click.BadParameter(f"a comma-separated list of numbers with no empty "
                                     f"items (got {text!r})")
        try:
            return tuple(kind(part) for part in parts)
        except ValueError:
            raise click.BadParameter(f"a comma-separated list of numbers (got {text!r})") \
                from None

    return parse


def one_number(field: OptionField) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """``run``'s level option: one number (a list is ``sweep``'s)."""
    kind = field.spec.item

    def parse(ctx: click.Context, param: click.Parameter, text: str | None) -> Any:
        if text is None:
            return None
        if "," in text:
            raise click.BadParameter("run measures one level; use `loadgen sweep` for "
                                     "several values")
        try:
            return (kind(text),)
        except ValueError:
            raise click.BadParameter(f"a number (got {text!r})") from None

    return parse


def _click_type(field: OptionField) -> Any:
    if field.spec.choices:
        return click.Choice(field.spec.choices)
    if field.spec.path == "file":
        return click.Path(dir_okay=False)
    if field.spec.path == "dir":
        return click.Path(file_okay=False)
    kind = field.spec.item or field.base_type
    return kind if kind in (int, float) else str


def click_option(field: OptionField, command: str) -> Callable:
    """``field`` as a click option of ``command`` (``run`` or ``sweep``)."""
    spec = field.spec
    kwargs: dict[str, Any] = {"help": spec.help, "metavar": spec.metavar}
    if spec.none_means is not None and field.default in (None, ()):
        kwargs["show_default"] = spec.none_means
    decls = [field.flag, field.key]
    if field.base_type is bool:
        if spec.negatable:
            decls[0] = f"{field.flag}/--no-{field.flag[2:]}"
        else:
            kwargs["is_flag"] = True
        kwargs["default"] = field.default
        kwargs.pop("metavar")
    elif spec.item is str:  # texts: a repeatable option
        kwargs.update(multiple=True, type=str)
    elif spec.item is not None:  # numbers: a comma list (sweep), one value (run)
        if command == ONE_LEVEL:
            kwargs.update(callback=one_number(field), metavar=spec.metavar.split("[")[0])
        else:
            kwargs["callback"] = comma_list(field)
    else:
        kwargs["type"] = _click_type(field)
        if field.default is not None:
            kwargs["default"] = field.default if kwargs["type"] is not str else str(field.default)
    return click.option(*decls, **kwargs)


def _output_extras() -> list[Callable]:
    """The CLI's own options: where the results go and how much is printed."""
    return [click.option("--out", type=click.Path(dir_okay=False, allow_dash=True),
                         metavar="FILE.json", show_default="loadgen-YYYYmmdd-HHMMSS.json",
                         help="Results JSON; - for stdout."),
            click.option("--quiet", is_flag=True, help="No progress line, no table.")]


def offered(command: str) -> list[OptionField]:
    """The run options ``command`` offers."""
    return [f for f in run_options() if command == LEVELS or not f.spec.sweep_only]


def run_options_decorator(command: str) -> Callable:
    """Decorate ``run`` or ``sweep`` with every run option it offers, in cloup groups
    (:data:`loadgen.option.GROUPS` order)."""
    by_group: dict[str, list[Callable]] = {group: [] for group in GROUPS}
    for field in offered(command):
        option = click_option(field, command)
        if field.key == "concurrency" and command == LEVELS:
            option = click.option(field.flag, field.key, callback=comma_list(field),
                                  metavar=field.spec.metavar, help=field.spec.help,
                                  show_default=",".join(map(str, SWEEP_CONCURRENCY)))
        by_group[field.spec.group].append(option)
    by_group["Measurement and output"][:0] = _output_extras()
    groups = [cloup.option_group(name, *options) for name, options in by_group.items()
              if options]

    def decorate(f: Callable) -> Callable:
        for group in reversed(groups):
            f = group(f)
        return f

    return decorate


def values_from(kw: dict[str, Any], command: str) -> dict[str, Any]:
    """The run options' public values from click's keywords (those left at their default
    included; ``None`` for an option not given). ``run``'s one-level values become lists."""
    values = {}
    for field in offered(command):
        value = kw.pop(field.key)
        if field.spec.item is not None and value is not None and not isinstance(value, tuple):
            value = (value,)
        if value is None or (value == () and field.default == ()):
            continue
        values[field.key] = value
    return values
