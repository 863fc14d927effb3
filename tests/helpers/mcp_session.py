"""Talking to ``loadgen mcp`` from tests: the SDK's own client, in memory or over a transport."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from mcp import Client

from loadgen.mcp.options import ServerOptions
from loadgen.mcp.server import build_server

POLL_S = 0.1
POLLS = 600  # 60 s at most for any run a test waits for


def session(options: ServerOptions | Any, body: Callable[[Client], Awaitable[Any]]) -> Any:
    """``body(client)`` with a client of a fresh server (``options``, or any client target)."""

    async def main() -> Any:
        server = build_server(options) if isinstance(options, ServerOptions) else options
        async with Client(server) as client:
            return await body(client)

    return asyncio.run(main())


async def call(client: Client, tool: str, **arguments: Any) -> dict:
    """The tool's structured result; fails the test with the tool's error text."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """The text of the tool error ``tool`` must return."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} succeeded: {result.structured_content}"
    return result.content[0].text


async def poll_until_ended(client: Client, run_id: str) -> dict:
    """run_status, every 0.1 s, until the run is no longer running (bounded)."""
    for _ in range(POLLS):
        status = await call(client, "run_status", run_id=run_id)
        if status["state"] != "running":
            return status
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"run {run_id} still running after {POLLS * POLL_S:.0f} s: {status}")


async def poll_until(client: Client, run_id: str, condition: Callable[[dict], bool]) -> dict:
    for _ in range(POLLS):
        status = await call(client, "run_status", run_id=run_id)
        if condition(status) or status["state"] != "running":
            return status
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"run {run_id}: condition not met after {POLLS * POLL_S:.0f} s")
