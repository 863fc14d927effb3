"""This machine's processes as /proc shows them (Linux): who is whose child."""

from __future__ import annotations

from pathlib import Path


def parents() -> dict[int, int]:
    """Every live process and its parent's pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # it ended while we looked
            found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid``."""
    return sorted(child for child, parent in parents().items() if parent == pid)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    below: dict[int, list[int]] = {}
    for child, parent in parents().items():
        below.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in below.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found
