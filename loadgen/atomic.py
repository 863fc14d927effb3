"""Every file loadgen writes goes through here: what a path may be, and how it is written.

- A regular file, or nothing yet: written atomically, a temp file beside it then a rename,
  so a crash or Ctrl-C never leaves half a results file, report or deployment record.
- ``-``: standard output.
- A character device (``/dev/null``, ``/dev/stdout``, a terminal) or a FIFO: written
  through, never replaced (a rename would turn ``/dev/full`` into a JSON file).
- A symlink: the same rules applied to the file it resolves to; the link itself stays.
- Anything else (a directory, a block device, a socket): refused in one line.

:func:`write_atomic` writes a whole file, :func:`open_for_writing` opens one that is
written as the run goes (exports), :func:`check_writable` tries a path before any load.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import IO


def resolve(path: str | os.PathLike) -> Path:
    """Where writing ``path`` lands: a symlink's final target (followed however deep), else
    ``path`` itself. Raises ``OSError`` (ELOOP) for a symlink loop."""
    path = Path(path)
    if not path.is_symlink():
        return path
    return Path(os.path.realpath(path, strict=False))


def _kind(path: Path) -> str:
    """``absent``, ``file``, ``stream`` (character device or FIFO) or what else it is."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a parent that is a file: said later
        return "absent"
    except OSError as exc:  # a symlink loop, a name too long
        return f"unusable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refusal(path: Path, what: str, kind: str) -> str:
    return (f"{what} {path} is {kind}; loadgen writes only regular files, character "
            "devices and FIFOs: choose a file name").lstrip()


def rewritable(path: str | os.PathLike) -> bool:
    """Whether ``path`` may be written more than once (a regular file, or absent): a device
    or FIFO gets a document once, at the end, not a partial one per level."""
    return str(path) != "-" and _kind(resolve(path)) in ("file", "absent")


def write_atomic(path: str | os.PathLike, data: bytes | str, what: str = "") -> Path:
    """Write ``data`` to ``path`` by the module's rules; returns ``path``. ``OSError`` when
    it cannot be written (``what``, the option's name, begins a refusal's message)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if str(path) == "-":
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
        return Path("-")
    target = resolve(path)
    kind = _kind(target)
    if kind == "stream":
        with open(target, "wb", buffering=0) as fh:  # no truncate or rename: write through
            fh.write(payload)
        return Path(path)
    if kind != "file" and kind != "absent":
        raise OSError(errno.EINVAL, _refusal(Path(path), what, kind))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # normal permissions (umask)
    try:
        with open(tmp, "wb") as fh:
            fh.write(payload)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Path(path)


def open_for_writing(path: str | os.PathLike, what: str) -> IO[str]:
    """A text file opened at ``path`` by the module's rules, for a file written as the run
    goes (no temp file: an export stays readable while it grows). ``OSError`` otherwise."""
    if str(path) == "-":
        return open(sys.stdout.fileno(), "w", encoding="utf-8", closefd=False)
    target = resolve(path)
    kind = _kind(target)
    if kind not in ("file", "absent", "stream"):
        raise OSError(errno.EINVAL, _refusal(Path(path), what, kind))
    return open(target, "w", encoding="utf-8")


def check_writable(path: str | os.PathLike, what: str = "--out") -> None:
    """Raise :class:`~loadgen.errors.ConfigError` unless a file can be written at ``path``.

    Called before a run sends any load, so a bad ``--out`` costs nothing. For a regular file
    it really creates (and removes) a file beside it: permission bits do not tell the truth
    for root or for file systems such as /sys or read-only mounts. Missing parent directories
    are made, as :func:`write_atomic` would make them. A device or FIFO is only checked for
    write permission (opening a FIFO would wait for its reader).
    """
    from .errors import ConfigError

    if str(path) == "-":
        return
    given = Path(path)
    try:
        path = resolve(given)
    except OSError as exc:
        raise ConfigError(f"{what} {given}: {exc.strerror or exc}; choose another path") from None
    kind = _kind(path)
    if kind == "a directory":
        raise ConfigError(f"{what} {given} is a directory; give a file name such as "
                          f"{given / 'results.json'}")
    if kind not in ("file", "absent", "stream"):
        raise ConfigError(_refusal(given, what, kind))
    if kind == "stream":
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{what} {given} cannot be written (permission denied); "
                              "choose a writable path")
        return
    existing = next(d for d in path.absolute().parents if d.exists())
    if not existing.is_dir():
        raise ConfigError(f"{what} {given} cannot be written: {existing} is a file, not a "
                          "directory; choose another path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{what} {given} cannot be written ({exc.strerror or exc}); "
                          "choose a writable path") from None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether writing ``a`` and writing ``b`` land on the same file (after symlinks and
    relative paths; hard links of an existing file too)."""
    if str(a) == "-" or str(b) == "-":
        return False
    real_a, real_b = Path(os.path.realpath(a)), Path(os.path.realpath(b))
    if real_a == real_b:
        return True
    try:
        return os.path.samefile(real_a, real_b)
    except OSError:
        return False
