"""Reading a scenario file: YAML -> parameters substituted -> every problem, or a Scenario.

The one boundary where PyYAML's exceptions become :class:`ScenarioError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Mapping

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..bounds import MAX_SCENARIO_BYTES, text_problem
from ..errors import ConfigError
from .build import build_scenario
from .nodes import Block, Context, Problem, line_of
from .params import Params, substitute
from .schema import SCENARIO, Scenario


class ScenarioError(ConfigError):
    """A scenario file with problems; ``problems`` holds every one, with its line."""

    def __init__(self, file: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{file}: {count}; run `loadgen scenario validate {file}` to list them")

    def lines(self) -> list[str]:
        """``FILE:LINE: message``, one per problem."""
        return [problem.format(self.file) for problem in self.problems]


@dataclasses.dataclass
class Checked:
    """What checking a scenario found."""

    scenario: Scenario | None  # None when there are problems
    problems: list[Problem]
    warnings: list[Problem]  # e.g. parameters not set in a lenient (--simulate) check
    params: Params


def check_text(text: str, file: str, params: Params) -> Checked:
    """Every problem of a scenario's text, and the Scenario when there are none."""
    try:
        loader = yaml.SafeLoader(text)  # its reader rejects NUL and other control characters
        root = loader.get_single_node()
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        return Checked(None, [Problem(line, f"character #x{exc.character:04x} is not allowed "
                                            "in a YAML file (a binary file?)")], [], params)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        return Checked(None, [Problem(line, f"not valid YAML: {exc.problem or exc}")], [], params)
    except yaml.YAMLError as exc:
        return Checked(None, [Problem(1, f"not valid YAML: {exc}")], [], params)
    if root is None:
        return Checked(None, [Problem(1, "the file is empty; see scenarios/demo-simulated.yaml "
                                         "for an example")], [], params)
    ctx = Context(loader)
    _substitute_params(root, params, ctx, set())
    block = SCENARIO.read(ctx, root, "")
    problems = _unique(ctx.problems)
    scenario = build_scenario(block, problems) if isinstance(block, Block) else None
    return Checked(scenario, _unique(problems), _unique(ctx.warnings), params)


def _substitute_params(node: Node, params: Params, ctx: Context, seen: set[int]) -> None:
    """``${VAR}`` in every scalar value (not in keys), once per node (aliases share nodes).
    A substituted plain scalar is typed again, so ``${PRICE}`` can become a number."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, ScalarNode):
        if "$" in node.value:
            value, problems = substitute(node.value, params)
            for message in problems:
                if params.lenient:
                    ctx.warnings.append(Problem(line_of(node), message))
                else:
                    ctx.problem(node, message)
            if problems:
                ctx.unresolved.add(id(node))
            elif value != node.value:
                ctx.substituted[id(node)] = node.value
                node.value = value
                if node.style is None:  # plain scalar: let YAML decide int/float/bool/str
                    node.tag = ctx.loader.resolve(ScalarNode, value, (True, False))
    elif isinstance(node, SequenceNode):
        for item in node.value:
            _substitute_params(item, params, ctx, seen)
    elif isinstance(node, MappingNode):
        for _, value in node.value:
            _substitute_params(value, params, ctx, seen)


def _unique(problems: list[Problem]) -> list[Problem]:
    """In line order, without repeats (a node reached through two aliases is read twice)."""
    return sorted(dict.fromkeys(problems), key=lambda p: p.line)


def load_scenario(path: str | os.PathLike, params: Mapping[str, str] | None = None,
                  environ: Mapping[str, str] | None = None, lenient: bool = False) -> Scenario:
    """Read and check a scenario file. Raises :class:`ScenarioError` listing every problem,
    or ConfigError when the file can't be read."""
    checked = check_file(path, params, environ, lenient)
    if checked.problems:
        raise ScenarioError(str(path), checked.problems)
    assert checked.scenario is not None
    return checked.scenario


def check_file(path: str | os.PathLike, params: Mapping[str, str] | None = None,
               environ: Mapping[str, str] | None = None, lenient: bool = False) -> Checked:
    """Read and check a scenario file (``loadgen scenario validate``). ``params`` are
    ``--param`` values; ``environ`` defaults to ``os.environ``."""
    if message := text_problem(str(path)):
        raise ConfigError(f"the scenario path {message}")
    path = Path(path)
    try:
        with open(path, "rb") as fh:  # at most one byte past the cap: /dev/zero ends too
            raw = fh.read(MAX_SCENARIO_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        size = path.stat().st_size
        raise ConfigError(f"{path} is {f'{size:,} bytes' if size else 'endless'}; scenario files "
                          f"are at most {MAX_SCENARIO_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save the scenario as UTF-8") from None
    resolved = Params(dict(params or {}), os.environ if environ is None else environ,
                      lenient=lenient)
    checked = check_text(text, str(path), resolved)
    if checked.scenario is not None:
        checked.scenario = dataclasses.replace(
            checked.scenario, path=str(path), sha256=hashlib.sha256(raw).hexdigest(),
            params_used=tuple(sorted(resolved.used)))
    return checked


__all__ = ["Checked", "ScenarioError", "check_file", "check_text", "load_scenario"]
