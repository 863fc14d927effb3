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
