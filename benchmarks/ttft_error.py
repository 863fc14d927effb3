"""TTFT error a user suffers, loadgen vs the physical-limit raw client, one command.

    python benchmarks/ttft_error.py                 # c=256 and c=1024, ~2 min
    python benchmarks/ttft_error.py --quick         # c=64 and c=256, one round each
    chrt -f 50 python benchmarks/ttft_error.py      # real-time priority on a shared machine

For each client and concurrency: ``reference_server.py`` runs pinned to core 0, the client
in its own process pinned to core 1 (when there are two cores), closed loop, TTFT 50 ms,
ITL 10 ms (40 ms at the second level, so the one-core server keeps up), 300 tokens; one warm-up round (every stream's connection opened and used once),
then the measured rounds. Per request, matched by ``X-Request-Id``:

    TTFT error = (client: first token seen - intended send) - (server: first write - request read)

so a request that left the client late is charged to the client. ITL error compares the
distribution of the client's gaps between token reads with the server's gaps between writes
(p50 and p99). CPU is the client process's CPU over the measured rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else 0.0


def _pin(core: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {core})


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.loads(reply.read())


def _score(url: str, client_rows: list[tuple[int, int, int, list[int]]]) -> dict:
    """client rows: (request id, intended ns, first-token ns, token read times)."""
    log = {str(e["request_id"]): e for e in _get_json(url + "/log")}
    ttft_err, client_gaps, server_gaps, send_side = [], [], [], []
    for request_id, intended, first, reads in client_rows:
        entry = log.get(str(request_id))
        if entry is None or not first:
            continue
        writes = entry["writes"]
        ttft_err.append(((first - intended) - (writes[0] - entry["read_ns"])) / 1e6)
        send_side.append((entry["read_ns"] - intended) / 1e6)
        client_gaps += [(b - a) / 1e6 for a, b in zip(reads, reads[1:])]
        server_gaps += [(b - a) / 1e6 for a, b in zip(writes, writes[1:])]
    return {
        "matched": len(ttft_err),
        "ttft_error_ms": {p: round(_pct(ttft_err, q), 3) for p, q in
                          (("p50", 50), ("p99", 99), ("max", 100))},
        # intended -> server read: the send side's share (client delay + kernel + server accept)
        "send_to_read_ms": {"p50": round(_pct(send_side, 50), 3),
                            "p99": round(_pct(send_side, 99), 3)},
        "itl_error_ms": {"p50": round(_pct(client_gaps, 50) - _pct(server_gaps, 50), 3),
                         "p99": round(_pct(client_gaps, 99) - _pct(server_gaps, 99), 3)},
    }


def run_raw(url: str, concurrency: int, rounds: int, tokens: int) -> dict:
    from raw_client import RawClient

    host, port = url.split("//")[1].split(":")
    warm = RawClient(host, int(port), concurrency, concurrency, tokens, first_id=1)
    measured = RawClient(host, int(port), concurrency, concurrency * rounds, tokens,
                         first_id=10_000_000)
    loop_run = _event_loop_run()
    loop_run(warm.run())
    _get_json(url + "/log")  # drop the warm-up entries
    cpu0, t0 = time.process_time(), time.perf_counter()
    loop_run(measured.run())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return {**_score(url, measured.results), "client_cpu_percent": round(100 * cpu / wall, 1),
            "client_cpu_s": round(cpu, 2)}


def run_loadgen(url: str, concurrency: int, rounds: int, tokens: int, transport: str,
                sagemaker: bool = False) -> dict:
    import loadgen
    from loadgen.config import RequestOptions

    target, extra = url, {}
    if sagemaker:  # fake keys: the reference server times requests, it checks no signature
        os.environ.update(AWS_ACCESS_KEY_ID="AKIDBENCH", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_DEFAULT_REGION="us-east-1")
        target, extra = "sagemaker://bench", {"endpoint_url": url, "payload_format": "openai"}

    async def sweep():
        return await loadgen.sweep(
            target, **extra, loads=[loadgen.ConstantConcurrency(concurrency)],
            stop=loadgen.StopRule(requests=concurrency * rounds, warmup=concurrency),
            options=RequestOptions(transport=transport), keep_records=True,
            prompts=loadgen.PromptSource(8, tokens), server_metrics_interval_s=None)

    result = _event_loop_run()(sweep())
    level = result.levels[0]
    rows = [(r.request_id, r.intended_ns, r.content_ns[0] if r.content_ns else 0, r.content_ns)
            for r in level.records or []]
    summary = result.to_dict()["levels"][0]
    client = summary["client"]
    return {**_score(url, rows), "client_cpu_percent": client["cpu_percent"],
            "client_cpu_s": round(client["cpu_percent"] / 100 * summary["duration_s"], 2),
            "failed": summary["requests"]["failed"],
            "send_lag_ms": {k: summary["send_lag_ms"][k] for k in ("p50", "p99", "max")},
            "loop_lag_ms_p99": client["loop_lag_ms"]["p99"], "saturated": client["saturated"]}


def _event_loop_run():
    if os.environ.get("BENCH_LOOP") == "asyncio":
        return asyncio.run
    try:
        import uvloop
        return uvloop.run
    except ImportError:
        return asyncio.run


def one(client: str, concurrency: int, rounds: int, tokens: int, itl_ms: float) -> dict:
    """Start the reference server, run one client against it in a child process."""
    extra = ["--sagemaker"] if client.startswith("sagemaker") else []
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "reference_server.py"),
                               "--ttft-ms", "50", "--itl-ms", str(itl_ms), *extra],
                              stdout=subprocess.PIPE,
                              text=True, preexec_fn=lambda: _pin(0))
    try:
        url = server.stdout.readline().strip()
        child = subprocess.run([sys.executable, __file__, "--one", client, url, str(concurrency),
                                str(rounds), str(tokens)], capture_output=True, text=True,
                               timeout=900)
        lines = [ln for ln in child.stdout.splitlines() if ln.startswith("{")]
        if child.returncode or not lines:
            return {"client": client, "concurrency": concurrency, "error": child.stderr[-600:]}
        return {"client": client, "concurrency": concurrency, "itl_ms": itl_ms,
                **json.loads(lines[-1])}
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", default="raw,stream,aiohttp,sagemaker",
                        help="raw, stream, aiohttp (loadgen's HTTP transports), sagemaker, "
                        "sagemaker-aiohttp")
    parser.add_argument("--concurrency", default=None, help="comma-separated levels")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--itl-ms", default="10,40", help="server ITL per concurrency level "
                        "(the single-core reference server writes about 25k events/s at most: "
                        "1024 streams need 40 ms)")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        client, url, concurrency, rounds, tokens = args.one
        _pin(1)
        if client == "raw":
            row = run_raw(url, int(concurrency), int(rounds), int(tokens))
        elif client.startswith("sagemaker"):  # sagemaker (stream transport), sagemaker-aiohttp
            transport = client.partition("-")[2] or "stream"
            row = run_loadgen(url, int(concurrency), int(rounds), int(tokens), transport, True)
        else:
            row = run_loadgen(url, int(concurrency), int(rounds), int(tokens), client)
        row["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(row))
        return
    levels = [int(c) for c in (args.concurrency or ("64,256" if args.quick else "256,1024"))
              .split(",")]
    rounds = args.rounds or (1 if args.quick else 3)
    itls = [float(x) for x in args.itl_ms.split(",")]
    rows = []
    for i, concurrency in enumerate(levels):
        for client in args.clients.split(","):
            row = one(client, concurrency, rounds, args.tokens, itls[min(i, len(itls) - 1)])
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
                      "rounds": rounds, "tokens": args.tokens, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
