"""What to start: a :class:`ServerSpec` (the command, its placeholders, where, how long to wait).

One description for every front door: ``loadgen server start``, a scenario phase's
``server:`` block and the MCP ``start_server`` tool all build a :class:`ServerSpec`,
so the defaults below are the defaults everywhere.

The command is a list of arguments (never a shell line): ``{port}`` and ``{model}`` in
any argument are replaced by the port and the model; no other brace is touched (vLLM
takes JSON arguments such as ``--override-generation-config '{"temperature": 0}'``).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import socket
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..config import RequestOptions
from ..errors import ConfigError
from ..redact import MASK, is_secret_name
from ..runconfig import default

DEFAULT_PORT = 8000
DEFAULT_READY_TIMEOUT_S = 1800.0  # a first vLLM start downloads the weights: minutes
DEFAULT_STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL after this many seconds
PLACEHOLDERS = ("{port}", "{model}")

# user@host, host, host.domain, an IPv4 or [IPv6] address; never an ssh option ("-o...").
_SSH_HOST = re.compile(r"(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])\Z")


@dataclass(frozen=True)
class ServerSpec:
    """An OpenAI-compatible server to start, wait for, and stop.

    ``command``: e.g. ``("vllm", "serve", "{model}", "--port", "{port}")`` or
    ``("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
    "--port", "{port}")``. ``model``: what ``/v1/models`` must list before the server
    counts as ready (None: any model). ``port`` 0 picks a free port (this machine only).
    ``host``: ``user@vm`` to start it there over SSH; None: this machine.
    ``env``: added to the server's environment (on a remote host: its whole extra
    environment; loadgen's own is not sent).
    """

    command: tuple[str, ...]
    model: str | None = None
    port: int = DEFAULT_PORT
    host: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    api_key_env: str = default(RequestOptions, "api_key_env")  # Bearer key for /v1/models

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", dict(self.env))
        for problem in spec_problems(self.__dict__):
            raise ConfigError(problem)

    @property
    def address(self) -> str:
        """Where the server listens, as seen from here: the SSH host's name, or loopback."""
        if self.host is None:
            return "127.0.0.1"
        return self.host.rpartition("@")[2]

    def with_free_port(self) -> "ServerSpec":
        """Port 0 replaced by a free port of this machine (a remote host needs a real one)."""
        if self.port != 0:
            return self
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return dataclasses.replace(self, port=port)

    def argv(self) -> list[str]:
        """The command with ``{port}`` and ``{model}`` filled in."""
        values = {"{port}": str(self.port), "{model}": self.model or ""}
        out = []
        for arg in self.command:
            for placeholder, value in values.items():
                arg = arg.replace(placeholder, value)
            out.append(arg)
        return out

    def url(self) -> str:
        address = self.address
        return f"http://{address}:{self.port}"


def spec_problems(values: Mapping[str, Any]) -> list[str]:
    """Every reason a :class:`ServerSpec` with these field values (defaults for the rest)
    cannot be started; the scenario checker reports each at its line."""
    given = {f.name: f.default if f.default is not dataclasses.MISSING else None
             for f in dataclasses.fields(ServerSpec)}
    given.update({"env": {}, **values})
    command, model, port, host = given["command"], given["model"], given["port"], given["host"]
    problems = []
    if not command or not all(isinstance(a, str) for a in command):
        problems.append("the server command is empty: give it as a list, e.g. "
                        "[vllm, serve, '{model}', --port, '{port}']")
    elif not command[0].strip():
        problems.append("the server command's first item (the program) is empty")
    elif any("\x00" in a for a in command):
        problems.append("an argument of the server command contains a NUL character")
    elif model is None and any("{model}" in a for a in command):
        problems.append("the server command uses {model} but no model is given")
    if not (isinstance(port, int) and 0 <= port < 65536):
        problems.append(f"the port must be 1-65535 (0: a free one), got {port!r}")
    if host is not None:
        if not _SSH_HOST.match(host):
            problems.append(f"host must look like user@vm or vm, got {host!r}")
        elif port == 0:
            problems.append("a remote host needs a port: give one (0 picks a free port on "
                            "this machine only)")
    for name, key in (("ready timeout", "ready_timeout_s"), ("stop grace", "stop_grace_s")):
        value = given[key]
        if not (isinstance(value, (int, float)) and 0 < value < float("inf")):
            problems.append(f"the {name} must be a positive number of seconds, got {value!r}")
    for name, value in given["env"].items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            problems.append(f"environment variable name {name!r} is not a valid name")
        elif "\x00" in str(value):
            problems.append(f"environment variable {name} contains a NUL character")
    if model is not None and "\x00" in model:
        problems.append("the model contains a NUL character")
    return problems


def split_command(text: str | Sequence[str]) -> tuple[str, ...]:
    """A command given as one string (split like a shell would, no expansion) or a list."""
    if isinstance(text, str):
        try:
            return tuple(shlex.split(text))
        except ValueError as exc:
            raise ConfigError(f"cannot split the server command {text!r}: {exc}") from None
    return tuple(text)


_SECRET_OPTION = re.compile(r"--?[A-Za-z0-9-]*(key|token|secret|password)[A-Za-z0-9-]*",
                            re.IGNORECASE)


def public_command(argv: Sequence[str]) -> list[str]:
    """The command as it may be written to files and shown: the value of any option named
    like a secret (``--api-key X``, ``--hf-token=X``) masked."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if _SECRET_OPTION.fullmatch(name) and is_secret_name(name.lstrip("-").replace("-", "_")):
            if eq:
                out.append(f"{name}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def default_api_key_env() -> str:
    """The request options' default key variable (the readiness probe sends the same key)."""
    return default(RequestOptions, "api_key_env")
