"""``start_run``'s arguments, generated from the run description.

Each run option (:func:`loadgen.runconfig.run_options`) becomes one typed, described
argument with the option's default and bounds, so ``start_run`` takes everything
``loadgen sweep`` takes, by the option's public name (``concurrency``, ``requests``,
``slos``, ``dataset``, ``turns``, ``workers``, ``profile``, ...). The tool's function
gets this signature (:func:`with_run_arguments`); the MCP SDK builds its input schema
from it.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Callable, Literal, Optional

from pydantic import Field

from ..option import OptionField
from ..runconfig import SIMULATOR, run_options
from .loadrun import OUTPUT_FILES

# Where start_run's default differs from the other front doors', and why.
MCP_DEFAULTS = {
    # The client is not trusted: no variable of the server's is read unless named, and
    # only one allowed with --allow-env (loadgen.mcp.confine).
    "api_key_env": ("", " Default: no API key; only variables the server was started with "
                        "--allow-env NAME for."),
}

_TARGET_HELP = ("Where to send load: an http(s)://host:port vLLM/OpenAI-compatible server, "
                f"sagemaker://ENDPOINT, or '{SIMULATOR}' for loadgen's built-in vLLM "
                "simulator.")


def _value_type(field: OptionField) -> Any:
    spec = field.spec
    if spec.choices:
        return Literal[spec.choices]
    if field.key == "workers":
        return int | Literal["auto"]
    kind = spec.item or field.base_type
    return kind if kind in (bool, int, float) else str


def _constraints(field: OptionField) -> dict[str, Any]:
    spec = field.spec
    out: dict[str, Any] = {}
    if spec.low is not None:
        out["gt" if spec.low_open else "ge"] = spec.low
    if spec.high is not None:
        out["le"] = spec.high
    return out


def _description(field: OptionField) -> str:
    text = field.spec.help
    if field.spec.metavar and field.spec.metavar not in ("N|auto",):
        text += f" Unit: {field.spec.metavar.split('[')[0]}."
    if field.spec.none_means and field.default in (None, ()):
        text += f" Default: {field.spec.none_means}."
    if field.key in OUTPUT_FILES:
        text += " A plain file name: written in the run's directory."
    if field.key in MCP_DEFAULTS:
        text += MCP_DEFAULTS[field.key][1]
    return text + f" (CLI: {field.flag})"


def argument(field: OptionField) -> inspect.Parameter:
    """One run option as a keyword argument of the tool."""
    value_type = _value_type(field)
    constraints = _constraints(field)
    if field.spec.item is not None:  # a list; its items carry the bounds
        annotation: Any = list[Annotated[value_type, Field(**constraints)]]
        constraints = {}
        default: Any = field.public_default()
        annotation = Optional[annotation]
        default = None if not default else default
    else:
        annotation = Annotated[value_type, Field(**constraints)] if constraints else value_type
        if field.default is None:
            annotation = Optional[annotation]
        default = MCP_DEFAULTS.get(field.key, (field.default,))[0]
    return inspect.Parameter(field.key, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation,
                                                  Field(description=_description(field))])


def run_arguments() -> list[inspect.Parameter]:
    """``target`` (required) and then every other run option."""
    target = inspect.Parameter("target", inspect.Parameter.KEYWORD_ONLY,
                               annotation=Annotated[str, Field(description=_TARGET_HELP)])
    return [target, *(argument(f) for f in run_options() if f.key != "target")]


def with_run_arguments(extra: list[inspect.Parameter] = ()) -> Callable:
    """Give the decorated ``fn(**arguments)`` the run options as its signature."""
    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        fn.__signature__ = signature.replace(parameters=[*run_arguments(), *extra])
        return fn
    return decorate
