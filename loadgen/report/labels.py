"""What runs are called in comparisons and reports: one rule for ``loadgen compare``,
``loadgen report --labels``, the MCP tools and the summary.

A run's default label is its scenario phase label, else its model, else a fallback (a
file name, "run N"). ``--labels`` names them instead, in order (study order for a report).
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..errors import ConfigError


def default_label(result: dict, fallback: str) -> str:
    return str((result.get("phase") or {}).get("label")
               or (result.get("target") or {}).get("model") or fallback)


def parse_labels(option: str | Sequence[str] | None, count: int) -> list[str] | None:
    """``"bf16,qat"`` → ``["bf16", "qat"]``; None when not given; exactly ``count`` names."""
    if option is None or option == "":
        return None
    labels = [part.strip() for part in (option.split(",") if isinstance(option, str)
                                        else option)]
    if len(labels) != count or not all(labels):
        example = ",".join(["bf16-a", "qat", "bf16-b"][:count] if count <= 3
                           else (f"run{i + 1}" for i in range(count)))
        raise ConfigError(f"--labels takes {_words(count)} names separated by commas, one "
                          f"per run in order, e.g. {example} (got {option!r})")
    return labels


def unique(labels: Sequence[str]) -> list[str]:
    """A repeated label gets ``#1``, ``#2`` ("bf16 #1", "qat", "bf16 #2")."""
    totals, seen = Counter(labels), Counter()
    out = []
    for label in labels:
        seen[label] += 1
        out.append(f"{label} #{seen[label]}" if totals[label] > 1 else label)
    return out


def pair_labels(option: str | Sequence[str] | None, results: Sequence[dict],
                fallbacks: Sequence[str]) -> tuple[str, str]:
    """The two names of ``loadgen compare``: given, else defaults; two equal defaults fall
    back to ``fallbacks`` (file names, run ids)."""
    given = parse_labels(option, 2)
    if given:
        return given[0], given[1]
    a, b = (default_label(r, f) for r, f in zip(results, fallbacks))
    return (a, b) if a != b else (fallbacks[0], fallbacks[1])


def _words(count: int) -> str:
    return {1: "one", 2: "two", 3: "three"}.get(count, str(count))
