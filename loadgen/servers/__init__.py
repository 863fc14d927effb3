"""Managed OpenAI-compatible servers (``vllm serve``, llama.cpp, our ``mock-server``):
start one as a process of its own, wait until it is ready, read its facts, stop it.

    from loadgen.servers import ServerSpec, start_server, find_server

    spec = ServerSpec(("python", "-m", "vllm.entrypoints.openai.api_server",
                       "--model", "{model}", "--port", "{port}"), model="/models/tiny", port=0)
    with start_server(spec, Path("runs/tiny")) as server:    # returns once ready
        server.url, server.state.time_to_ready_s, server.state.facts
    # stopped: SIGTERM to its process group, SIGKILL after spec.stop_grace_s

    find_server(Path("runs/tiny")).stop()    # from another process, via the state file

Modules, in reading order: :mod:`.spec` (what to start, the defaults every front door
shares), :mod:`.manager` (start, readiness, stop), :mod:`.state` (the state file),
:mod:`.ready` (the readiness probe), :mod:`.local` and :mod:`.remote` (a process here,
or over ``ssh`` on ``--host``). No click here: the command is :mod:`loadgen.cli.server`.
"""

from .manager import (
    ManagedServer,
    ServerStartError,
    find_server,
    start_server,
    tail_file,
)
from .spec import (
    DEFAULT_PORT,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_STOP_GRACE_S,
    ServerSpec,
    public_command,
    spec_problems,
    split_command,
)
from .state import ServerState

__all__ = ["DEFAULT_PORT", "DEFAULT_READY_TIMEOUT_S", "DEFAULT_STOP_GRACE_S", "ManagedServer",
           "ServerSpec", "ServerStartError", "ServerState", "find_server", "public_command",
           "spec_problems", "split_command", "start_server", "tail_file"]
