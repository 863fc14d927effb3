"""What a client may make the MCP server read, write, name and send to.

The client is not trusted: it may be a model following instructions it found in a web
page. So every path a tool takes must resolve (symlinks followed) inside ``--workdir`` or
a directory given with ``--allow-read``; only regular files are read, each under a size
cap; an API key comes only from a variable allowed with ``--allow-env``; load goes only
to targets matching ``--allow-target`` (when given). Each refusal is one line naming the
flag that would allow it. No SDK import here.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path
from typing import Iterator, TextIO
from urllib.parse import urlsplit

from ..errors import ConfigError, one_line
from .options import ServerOptions

MB = 1024 * 1024
SCENARIO_MAX_BYTES = 1 * MB
RESULTS_MAX_BYTES = 100 * MB  # a results file, a phase file, run.json
LOG_MAX_BYTES = 200 * MB  # a vLLM log, read as a stream


def allowed_path(options: ServerOptions, text: str, what: str) -> Path:
    """``text`` as an absolute path with symlinks resolved, if that is inside the work
    directory or an ``--allow-read`` directory; ConfigError otherwise."""
    if "\0" in text:
        raise ConfigError(f"{what}: a path may not contain a NUL character")
    try:
        resolved = Path(text).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before 3.13)
        raise ConfigError(f"{what} {one_line(text, 200)}: cannot resolve it ({exc})") from None
    if not any(resolved.is_relative_to(root) for root in options.readable_roots):
        shown = ", ".join(str(root) for root in options.readable_roots)
        raise ConfigError(f"{what} {one_line(text, 200)}: outside the directories this "
                          "server may read "
                          f"({shown}); restart it with --allow-read DIR to allow a directory")
    return resolved


def regular_file(path: Path, what: str, max_bytes: int) -> Path:
    """``path`` if it is a regular file of at most ``max_bytes``; ConfigError otherwise
    (a device, a FIFO or a directory is never read)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{what} {path}: not a regular file; only regular files are read")
    if info.st_size > max_bytes:
        raise ConfigError(f"{what} {path}: {info.st_size / MB:.1f} MB, over this server's "
                          f"limit of {max_bytes // MB} MB for a {what}")
    return path


def readable_file(options: ServerOptions, text: str, what: str, max_bytes: int) -> Path:
    """:func:`allowed_path` and :func:`regular_file` in one."""
    return regular_file(allowed_path(options, text, what), what, max_bytes)


REPORT_FILES = ("report.md", "summary.json")  # what get_report writes into a directory


def results_directory(options: ServerOptions, directory: Path, what: str) -> Path:
    """A directory whose ``*.json`` files a report reads and where it writes its files:
    each file read must itself resolve inside the allowed directories (a symlink out is
    refused) and be a regular file under the cap; a report file is written only where
    there is none yet or a regular file (never through a link, a device or a FIFO)."""
    if not directory.is_dir():
        raise ConfigError(f"{what} {directory}: no such directory")
    for path in sorted(directory.glob("*.json")):
        readable_file(options, str(path), "results file", RESULTS_MAX_BYTES)
    for name in REPORT_FILES:
        path = directory / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise ConfigError(f"{what} {directory}: {name} there is not a regular file; the "
                              "report is not written over it")
    return directory


def capped_lines(handle: TextIO, max_bytes: int) -> Iterator[str]:
    """The lines of ``handle`` until ``max_bytes`` characters have been read (a file that
    grows while it is read is not read past the cap)."""
    left = max_bytes
    while left > 0:
        line = handle.readline(left)
        if not line:
            return
        left -= len(line)
        yield line


def allow_api_key_env(options: ServerOptions, name: str | None) -> str:
    """The variable an API key may be read from: ``""`` (no key) unless the client named
    one allowed at start. The server's other secrets can't be sent to a client's target."""
    if not name:
        return ""
    if name not in options.allow_env:
        allowed = ", ".join(options.allow_env) or "none"
        raise ConfigError(f"api_key_env {name}: this server may send only keys from the "
                          f"variables allowed at start ({allowed}); restart it with "
                          f"--allow-env {name} to allow it")
    return name


def target_key(target: str) -> str:
    """What ``--allow-target`` patterns match: ``SCHEME://HOST:PORT`` of a URL (user info,
    path and query dropped, so ``http://127.0.0.1:80@elsewhere/`` is ``elsewhere``'s),
    else the target as given (``sagemaker://NAME``, ``simulator``)."""
    try:
        parts = urlsplit(target.strip())
        if parts.scheme not in ("http", "https"):
            return target.strip()
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # "Invalid IPv6 URL", a port out of range
        raise ConfigError(f"{one_line(target, 200)}: not a valid URL ({exc})") from None
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port}"


def _matches(target: str, patterns: tuple[str, ...]) -> bool:
    key = target_key(target)
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)


def allow_target(options: ServerOptions, target: str, what: str = "target") -> str:
    """``target`` if it matches a ``--allow-target`` pattern (shell-style, matched against
    :func:`target_key`, e.g. ``http://10.0.0.5:*``), or if none was given (any target)."""
    patterns = options.allow_target
    if patterns and not _matches(target, patterns):
        raise ConfigError(f"{what} {target}: not allowed by this server's --allow-target "
                          f"patterns ({', '.join(patterns)}); restart it with --allow-target "
                          "PATTERN to allow it")
    return target


def allow_aws_endpoint(options: ServerOptions, endpoint_url: str | None) -> str | None:
    """A call's AWS API endpoint: the server's own, or one an explicit ``--allow-target``
    pattern allows. The server signs AWS calls with its credentials: a client must not
    send them to a host of its choosing."""
    if endpoint_url is None or endpoint_url == options.aws_endpoint_url:
        return options.aws_endpoint_url
    if not _matches(endpoint_url, options.allow_target):
        raise ConfigError(f"endpoint_url {endpoint_url}: the server signs AWS calls with its "
                          "credentials and sends them only to its own --aws-endpoint-url or "
                          "to an endpoint matching an --allow-target pattern")
    return endpoint_url


TARGET_ARGUMENTS = ("target", "url")  # where a tool sends requests


def check_allowances(options: ServerOptions, arguments: dict) -> None:
    """The allowances, by argument name, for every tool whatever its parameters (so a
    tool that gains a ``target`` or an ``api_key_env`` is held to them without a word):
    targets and URLs match ``--allow-target``, an ``endpoint_url`` is the server's own or
    allowed, an ``api_key_env`` is allowed with ``--allow-env``."""
    for name, value in arguments.items():
        if not isinstance(value, str) or not value:
            continue
        if name in TARGET_ARGUMENTS:
            allow_target(options, value, name)
        elif name == "endpoint_url":
            allow_aws_endpoint(options, value)
        elif name == "api_key_env":
            allow_api_key_env(options, value)
