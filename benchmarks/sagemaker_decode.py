"""CPU cost of the SageMaker streaming path vs the HTTP path, per million streamed tokens.

    python benchmarks/sagemaker_decode.py [--tokens N] [--e2e-tokens N] [--concurrency C]

Prints one JSON line:

- ``decode_only``: in-process, no sockets. The same vLLM OpenAI SSE body is parsed
  (a) as the HTTP target sees it: one socket read per engine step, straight into
  ``OpenAIStreamParser``; (b) as the SageMaker target sees it: every step wrapped
  in an event-stream PayloadPart frame, one frame per read, through
  ``EventStreamReader`` (loadgen's ``FrameSplitter``) into the same parser.
- ``end_to_end``: client process CPU while streaming in fast mode over loopback:
  SageMakerTarget against ``tests/helpers/sagemaker_server.py`` vs OpenAIHTTPTarget against
  the built-in simulator, both servers in their own processes writing one event per
  write, same concurrency, same tokens per request. Includes signing, aiohttp, parsing.

The issue's target: the SageMaker target within 2x of the HTTP target's cost, judged on
``end_to_end.ratio`` (``within_target``). ``decode_only.ratio`` isolates the parsers: there
botocore's pure-Python frame decoding is compared with orjson-backed SSE parsing alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from loadgen.codecs.event_stream import EventStreamReader
from loadgen.codecs.openai_stream import OpenAIStreamParser
from loadgen.config import RequestOptions
from loadgen.record import Prompt, RequestRecord
from tests.helpers.sagemaker_server import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    payload_part,
    stream_events,
)
from loadgen.targets.openai_http import OpenAIHTTPTarget
from loadgen.targets.sagemaker import SageMakerTarget

ROOT = Path(__file__).resolve().parent.parent

TOKENS_PER_REQUEST = 500
TARGET_RATIO = 2.0


def per_million(cpu_s: float, tokens: int) -> float:
    return round(cpu_s / tokens * 1e6, 3)


# --------------------------------------------------------------------------- decode only

def _decode_http(reads: list[bytes], requests: int) -> None:
    for _ in range(requests):
        record = RequestRecord()
        parser = OpenAIStreamParser(record)
        for now, chunk in enumerate(reads):
            parser.feed(chunk, now)
        parser.close(len(reads))


def _decode_sagemaker(reads: list[bytes], requests: int) -> None:
    for _ in range(requests):
        record = RequestRecord()
        reader = EventStreamReader(record, OpenAIStreamParser(record))
        for now, chunk in enumerate(reads):
            reader.feed(chunk, now)
        reader.close(len(reads))


def decode_only(tokens: int) -> dict:
    steps = stream_events("openai", TOKENS_PER_REQUEST)
    frames = [payload_part(step) for step in steps]
    requests = max(1, tokens // TOKENS_PER_REQUEST)
    results = {}
    paths = (("http", _decode_http, steps), ("sagemaker", _decode_sagemaker, frames))
    for name, run, reads in paths:
        run(reads, 2)  # warm up
        start = time.process_time()
        run(reads, requests)
        results[name] = time.process_time() - start
    total = requests * TOKENS_PER_REQUEST
    http, sagemaker = per_million(results["http"], total), per_million(results["sagemaker"], total)
    return {"tokens": total, "http_cpu_s_per_mtok": http, "sagemaker_cpu_s_per_mtok": sagemaker,
            "ratio": round(sagemaker / http, 2)}


# --------------------------------------------------------------------------- end to end

def _start(command: list[str]) -> tuple[subprocess.Popen, str]:
    """Start a server process and return it with the URL or port it prints first."""
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    line = process.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+", line) or re.fullmatch(r"(\d+)\s*", line)
    if not match:
        process.kill()
        raise SystemExit(f"server did not start: {line!r}")
    url = match.group(0) if match.group(0).startswith("http") else f"http://127.0.0.1:{match[1]}"
    return process, url


async def _drive(target, tokens: int, concurrency: int) -> tuple[float, int]:
    """Open the target, then stream ``tokens`` tokens with ``concurrency`` workers; client CPU."""
    requests = max(concurrency, tokens // TOKENS_PER_REQUEST)
    remaining = iter(range(requests))
    records: list[RequestRecord] = []

    async def worker() -> None:
        for _ in remaining:
            record = RequestRecord()
            await target.send(Prompt("Hello", max_tokens=TOKENS_PER_REQUEST), record)
            records.append(record)

    await target.open()
    try:
        start = time.process_time()
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker())
        cpu = time.process_time() - start
    finally:
        await target.close()
    failed = [record.error_type for record in records if not record.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {sorted(set(failed))}")
    return cpu, sum(record.output_tokens for record in records)


def end_to_end(tokens: int, concurrency: int) -> dict:
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                      AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true")
    options = RequestOptions(model=None)
    servers = {
        "sagemaker": [sys.executable, "-m", "tests.helpers.sagemaker_server", "--coalesce", "0",
                      "--max-cuts", "0"],
        "http": [sys.executable, "-m", "loadgen.cli", "mock-server", "--port", "0",
                 "--ttft-ms", "0", "--itl-ms", "0", "--max-num-seqs", "1024",
                 "--events-per-write", "1"],
    }
    results = {}
    for name, command in servers.items():
        process, url = _start(command)
        try:
            target = (SageMakerTarget("openai", options, endpoint_url=url) if name == "sagemaker"
                      else OpenAIHTTPTarget(url, options))
            results[name] = asyncio.run(_drive(target, tokens, concurrency))
        finally:
            process.kill()
            process.wait()
    http = per_million(*results["http"])
    sagemaker = per_million(*results["sagemaker"])
    return {"tokens": results["sagemaker"][1], "concurrency": concurrency,
            "http_cpu_s_per_mtok": http, "sagemaker_cpu_s_per_mtok": sagemaker,
            "ratio": round(sagemaker / http, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=500_000, help="decode-only tokens")
    parser.add_argument("--e2e-tokens", type=int, default=200_000, help="end-to-end tokens")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a tenth of the tokens (smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.e2e_tokens = args.tokens // 10, args.e2e_tokens // 10
    decode = decode_only(args.tokens)
    e2e = end_to_end(args.e2e_tokens, args.concurrency)
    print(json.dumps({"benchmark": "sagemaker_decode", "decode_only": decode, "end_to_end": e2e,
                      "target_ratio": TARGET_RATIO,
                      "within_target": e2e["ratio"] <= TARGET_RATIO}))


if __name__ == "__main__":
    main()
