"""``${VAR}`` / ``${VAR:-default}`` parameters in scenario files (pure code, no I/O).

Values come from ``--param KEY=VALUE`` first, then the environment. ``$${`` writes a
literal ``${``. Substitution happens on YAML *scalar nodes* (see
:mod:`loadgen.scenario.loader`), so a missing parameter is reported with the line it
is on, and a substituted plain scalar is typed afterwards (``${PRICE}`` -> ``0.35``
becomes a number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import ConfigError

# ``$${`` (escape), or ``${NAME}`` / ``${NAME:-default}``. Defaults cannot contain ``}``.
_REFERENCE = re.compile(r"\$\$\{|\$\{([^}:]*)(?::-([^}]*))?\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class Params:
    """Where parameter values come from, and which were used (for warnings and metadata)."""

    given: Mapping[str, str] = field(default_factory=dict)  # --param KEY=VALUE
    environ: Mapping[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    # Lenient (``--simulate``): a missing parameter is a warning and its value is left
    # out, since a simulated run never contacts the targets or AWS it would name.
    lenient: bool = False

    def lookup(self, name: str) -> str | None:
        if name in self.given:
            return self.given[name]
        return self.environ.get(name)

    def unused_given(self) -> list[str]:
        """``--param`` names the file never mentions (likely typos)."""
        return sorted(set(self.given) - self.used)


def parse_param_options(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` from repeated ``--param`` options."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _NAME.match(name):
            raise ConfigError(f"--param takes KEY=VALUE with KEY a variable name "
                              f"(got {pair!r})")
        out[name] = value
    return out


def substitute(text: str, params: Params) -> tuple[str, list[str]]:
    """Replace every reference in ``text``; return the new text and one problem per
    reference that could not be resolved (missing parameter, bad name)."""
    problems: list[str] = []

    def replace(match: re.Match) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if not _NAME.match(name):
            problems.append(f"bad parameter reference {match.group(0)!r}: write ${{NAME}} or "
                            "${NAME:-default} with NAME made of letters, digits and _")
            return match.group(0)
        params.used.add(name)
        value = params.lookup(name)
        if value is None or (value == "" and default is not None):
            if default is not None:
                return default
            problems.append(f"parameter ${{{name}}} is not set: export {name}=... or pass "
                            f"--param {name}=...")
            return match.group(0)
        return value

    return _REFERENCE.sub(replace, text), problems
