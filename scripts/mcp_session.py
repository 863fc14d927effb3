"""An MCP session with ``loadgen mcp``, as an assistant would drive it: deploy -> sweep ->
compare -> delete. It prints every call and (abridged) answer: README's transcript.

No GPU, no AWS: the control plane is moto in server mode (fake credentials; moto's
endpoints are InService at once but serve no traffic), and the sweeps go to two built-in
simulators standing in for the deployed model (``loadgen mock-server --profile bf16`` and
``--profile qat``: calibrated to the published L4 study). Every number is SIMULATED.

    pip install -e '.[mcp,test]'    # the MCP SDK, and moto[server]
    python scripts/mcp_session.py
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

from mcp import Client, StdioServerParameters

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11-gpu-py312"
SHOWN_KEYS = 14  # fields of an answer shown; the rest is elided


@contextmanager
def moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def simulator(profile: str) -> Iterator[str]:
    port = _free_port()
    child = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "mock-server", "--profile",
                              profile, "--port", str(port)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):  # 20 s at most
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        child.terminate()
        child.wait(timeout=10)


def abridged(value: Any, depth: int = 0) -> Any:
    """Long answers cut down for reading: the first fields, short lists, no histograms."""
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if k not in ("histograms", "histogram_units")]
        out = {k: abridged(v, depth + 1) for k, v in items[:SHOWN_KEYS]}
        if len(items) > SHOWN_KEYS:
            out["..."] = f"{len(items) - SHOWN_KEYS} more"
        return out
    if isinstance(value, list) and len(value) > 3:
        return [abridged(v, depth + 1) for v in value[:3]] + [f"... {len(value) - 3} more"]
    if isinstance(value, list):
        return [abridged(v, depth + 1) for v in value]
    return value


async def step(client: Client, tool: str, show: Any = None, **arguments: Any) -> dict:
    print(f"\n>>> {tool}({json.dumps(arguments)})")
    messages: list[str] = []

    async def progress(value, total, message):
        messages.append(message)

    result = await client.call_tool(tool, arguments, progress_callback=progress)
    unique = list(dict.fromkeys(messages))
    for message in unique[:2] + (["..."] if len(unique) > 4 else []) + unique[2:][-2:]:
        print(f"    progress: {message}")
    if result.is_error:
        print("<<< tool error: " + result.content[0].text)
        return {}
    data = result.structured_content
    shown = show(data) if show else data
    text = shown if isinstance(shown, str) else json.dumps(abridged(shown), indent=1)
    print("<<< " + text.replace("\n", "\n    "))
    return data


async def session(moto_url: str, bf16_url: str, qat_url: str, workdir: str) -> None:
    server = StdioServerParameters(command=sys.executable, args=[
        "-m", "loadgen.cli", "mcp", "--allow-deploy", "--workdir", workdir,
        "--region", REGION, "--aws-endpoint-url", moto_url, "--max-concurrency", "16"],
        env=dict(os.environ))  # the SDK passes only a minimal environment otherwise
    async with Client(server) as client:
        tools = await client.list_tools()
        print(f"connected: {len(tools.tools)} tools: " + ", ".join(t.name for t in tools.tools))
        await step(client, "deploy_endpoint", name="gemma-qat", image=IMAGE, role=ROLE,
                   model_id="google/gemma-4-E2B-it-qat-w4a16-ct", instance_type="ml.g4dn.xlarge",
                   env=["SM_VLLM_MAX_MODEL_LEN=4096"], poll_interval_s=1, facts_wait_s=0,
                   show=lambda d: {k: d[k] for k in ("endpoint_name", "status", "target",
                                                     "seconds_to_in_service", "record")})
        await step(client, "endpoint_status", name="gemma-qat")
        runs = {}
        for label, url in (("bf16", bf16_url), ("qat", qat_url)):
            started = await step(client, "start_run", target=url, concurrency=[1, 4, 8],
                                 requests=8, output_tokens=64,
                                 show=lambda d: {k: d[k] for k in ("run_id", "state", "results")})
            runs[label] = started["run_id"]
            await step(client, "run_status", run_id=started["run_id"], wait_s=120,
                       show=lambda d: {k: d[k] for k in (
                           "state", "elapsed_s", "levels_done", "completed", "failed",
                           "output_tokens", "partial")})
            await step(client, "get_results", run_id=started["run_id"],
                       show=lambda d: d["table"])
        await step(client, "compare_runs", a=runs["bf16"], b=runs["qat"], labels=["bf16", "qat"],
                   show=lambda d: "\n".join(d["text"].splitlines()[:11] + ["  ... (concurrency 4 "
                                                                           "and 8 likewise)"]))
        await step(client, "delete_endpoint", name="gemma-qat", poll_interval_s=1)
        await step(client, "list_endpoints")
        await step(client, "list_runs", show=lambda d: [
            {k: r[k] for k in ("run_id", "state", "target")} for r in d["runs"]])


def main() -> None:
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"})
    with ExitStack() as stack:
        moto_url = stack.enter_context(moto_server())
        bf16 = stack.enter_context(simulator("bf16"))
        qat = stack.enter_context(simulator("qat"))
        workdir = stack.enter_context(tempfile.TemporaryDirectory())
        asyncio.run(session(moto_url, bf16, qat, workdir))


if __name__ == "__main__":
    main()
