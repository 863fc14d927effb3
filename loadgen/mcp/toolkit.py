"""What every tool shares: a time bound, and loadgen's errors as MCP tool errors.

A tool that fails for a reason the caller can fix returns an MCP *tool error* whose
text is loadgen's one-line message (the server keeps running). A bug is logged on
the server's stderr and reported as a generic error.
"""

import functools
from typing import Any, Awaitable, Callable

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from ..errors import LoadgenError

ToolFn = Callable[..., Awaitable[Any]]

# Hints for clients (e.g. to ask the user before a tool that changes the cloud).
READ_ONLY = ToolAnnotations(read_only_hint=True)
CLOUD_CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True,
                               open_world_hint=True)

QUICK_S = 60.0  # tools that read files or the run table
AWS_S = 180.0  # one control-plane call, with botocore's retries


def bounded(seconds: float | Callable[[dict], float]) -> Callable[[ToolFn], ToolFn]:
    """Bound an async tool to ``seconds`` (or ``seconds(kwargs)``); map LoadgenError.

    The wrapper keeps the tool's signature (``functools.wraps``): the SDK builds the
    input schema from it.
    """

    def decorate(fn: ToolFn) -> ToolFn:
        @functools.wraps(fn)
        async def tool(**kwargs: Any) -> Any:
            limit = seconds(kwargs) if callable(seconds) else seconds
            try:
                with anyio.fail_after(limit):
                    return await fn(**kwargs)
            except TimeoutError:
                raise ToolError(f"{fn.__name__} did not finish within its limit of {limit:g} s; "
                                "what it started may still be going (check with the status "
                                "tools)") from None
            except LoadgenError as exc:
                raise ToolError(str(exc)) from None

        return tool

    return decorate


def refuse_without_deploy(allowed: bool, what: str) -> None:
    """The ``--allow-deploy`` rule, for every tool that creates or deletes cloud resources."""
    if not allowed:
        raise ToolError(f"refused: {what} creates or deletes billable AWS resources, and this "
                        "server was started without --allow-deploy (restart it with "
                        "`loadgen mcp --allow-deploy` to allow that)")
