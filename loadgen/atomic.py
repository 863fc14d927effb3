"""Atomic file writes: a temp file beside the target, then a rename.

A crash or Ctrl-C never leaves half a results file, report or deployment record.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # normal permissions (umask)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_writable(path: str | os.PathLike) -> None:
    """Raise :class:`~loadgen.errors.ConfigError` unless a file can be written at ``path``.

    Called before a run sends any load, so a bad ``--out`` costs nothing. It really creates
    (and removes) a file beside ``path``: permission bits do not tell the truth for root or
    for file systems such as /sys or read-only mounts. Missing parent directories are made,
    as :func:`write_atomic` would make them.
    """
    from .errors import ConfigError

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--out {path} is a directory; give a file name such as "
                          f"{path / 'results.json'}")
    existing = next(d for d in path.absolute().parents if d.exists())
    if not existing.is_dir():
        raise ConfigError(f"--out {path} cannot be written: {existing} is a file, not a "
                          "directory; choose another path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out {path} cannot be written ({exc.strerror or exc}); "
                          "choose a writable path") from None
