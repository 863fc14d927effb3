"""What to call two runs side by side (``loadgen compare``, MCP ``compare_runs``)."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError


def _default_label(result: dict, path: Path) -> str:
    return str((result.get("phase") or {}).get("label")
               or (result.get("target") or {}).get("model") or path.stem)


def compare_labels(option: str | None, results: list[dict], paths: list[Path]) -> tuple[str, str]:
    """Names for runs A and B: ``option`` ("A,B") when given, else each run's phase label,
    model or file name (the file names when both would read the same)."""
    if option:
        labels = [part.strip() for part in option.split(",")]
        if len(labels) != 2 or not all(labels):
            raise ConfigError(f"--labels takes two names separated by a comma, e.g. "
                              f"bf16,qat (got {option!r})")
        return labels[0], labels[1]
    a, b = (_default_label(r, p) for r, p in zip(results, paths))
    return (a, b) if a != b else (paths[0].stem, paths[1].stem)
