"""The MCP server's options: where runs live, what it may do, and the limits on load."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

DEFAULT_WORKDIR = "loadgen-mcp"
DEFAULT_HOST = "127.0.0.1"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ServerOptions:
    """What ``loadgen mcp`` was started with. The limits bound every call of every client."""

    workdir: Path = Path(DEFAULT_WORKDIR)
    # Tools that create or delete cloud resources (deploy, delete, scenarios that
    # deploy) are refused unless this is set.
    allow_deploy: bool = False
    max_concurrency: int = 64  # caps concurrency levels and open-loop in-flight requests
    max_duration_s: float = 3600.0  # a background run is stopped (results kept) after this
    max_active_runs: int = 1  # runs at once: two runs on one target would skew each other
    # start_server runs only commands that begin with one of these (each split like a
    # shell: "vllm", "python -m vllm.entrypoints.openai.api_server"), on these ssh hosts.
    allowed_server_commands: tuple[str, ...] = ()
    allowed_server_hosts: tuple[str, ...] = ()
    region: str | None = None  # AWS defaults for the endpoint tools (a call may override)
    aws_endpoint_url: str | None = None
    # What a client may make the server read, send and name (see :mod:`.confine`): paths
    # inside the work directory or these directories; API keys only from these variables
    # (none by default); targets matching these patterns (none given: any target).
    allow_read: tuple[Path, ...] = ()
    allow_env: tuple[str, ...] = ()
    allow_target: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ConfigError(f"--max-concurrency must be >= 1 (got {self.max_concurrency})")
        if not self.max_duration_s > 0:
            raise ConfigError(f"--max-duration must be > 0 seconds (got {self.max_duration_s})")
        if self.max_active_runs < 1:
            raise ConfigError(f"--max-active-runs must be >= 1 (got {self.max_active_runs})")
        for directory in self.allow_read:
            if not Path(directory).is_dir():
                raise ConfigError(f"--allow-read {directory}: no such directory")
        for name in self.allow_env:
            if not _ENV_NAME.fullmatch(name):
                raise ConfigError(f"--allow-env {name!r}: expected an environment variable "
                                  "name (letters, digits and _)")

    def resolved(self) -> "ServerOptions":
        """These options with every directory made absolute, symlinks resolved (the
        confinement compares resolved paths)."""
        return dataclasses.replace(self, workdir=self.workdir.resolve(),
                                   allow_read=tuple(Path(d).resolve() for d in self.allow_read))

    @property
    def readable_roots(self) -> tuple[Path, ...]:
        """Every path a tool takes must resolve inside one of these."""
        return (self.workdir, *self.allow_read)

    @property
    def runs_dir(self) -> Path:
        return self.workdir / "runs"

    @property
    def deployments_dir(self) -> Path:
        return self.workdir / "deployments"


def parse_http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` -> (host, port); the host defaults to 127.0.0.1."""
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise ConfigError(f"--http takes HOST:PORT or PORT, e.g. 127.0.0.1:8765 (got {text!r})")
    return host, port


def check_http_access(host: str, token: str | None) -> None:
    """A server reachable from other machines needs a token: without one, anyone who can
    reach it could send load (and, with --allow-deploy, deploy endpoints)."""
    from ..simulator.runners import is_loopback

    if not is_loopback(host) and not token:
        raise ConfigError(f"--http on {host} (not a loopback address) needs --http-token "
                          "TOKEN (or LOADGEN_MCP_TOKEN set): every request must then carry "
                          "Authorization: Bearer TOKEN")
