"""Client benchmark: one command, prints a JSON document and a summary.

    python benchmarks/run.py            # full run (~40 s on 2 cores)
    python benchmarks/run.py --quick    # smoke run (~15 s)

Measures loadgen's HTTP client against the built-in simulator running in a child
process (so their CPU is accounted separately):

1. *batched*: the simulator streams as fast as the socket takes it, many SSE events per
   write. Streamed tokens/s, client CPU-seconds per million tokens, the simulator's CPU
   (a server-bound result shows the server near 100 % of a core), peak RSS, and RSS after a
   run twice as long (memory must not grow with run length).
2. *paced*: TTFT 50 ms, ITL 10 ms at concurrency 1, 64, 256. Timing error per request,
   matched by ``X-Request-Id`` with the simulator's own log (both clocks are
   CLOCK_MONOTONIC): TTFT error = (client: first content − intended send) − (simulator:
   first content write − request received), the error a user suffers, send side included;
   end error = client's last content timestamp − simulator's last write.
   ``benchmarks/ttft_error.py`` does the same against a leaner reference server, side by side
   with a raw asyncio client (the physical limit).
3. *sagemaker*: see ``benchmarks/sagemaker_decode.py`` (event-stream path), run from here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import urllib.request

import loadgen
from loadgen.simulator import SimProfile, simulator_process


def _get_json(url: str) -> dict | list:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def _sweep(url: str, concurrency: int, requests: int, output_tokens: int,
                 keep_records: bool = False, warmup: int = 0):
    return await loadgen.sweep(url, loads=[loadgen.ConstantConcurrency(concurrency)],
                               stop=loadgen.StopRule(requests=requests, warmup=warmup),
                               prompts=loadgen.PromptSource(32, output_tokens),
                               keep_records=keep_records)


def _run(coro):
    """The same event loop the CLI uses: uvloop when installed (BENCH_LOOP=asyncio: never)."""
    if os.environ.get("BENCH_LOOP") == "asyncio":
        return asyncio.run(coro)
    from loadgen.cli.common import event_loop_run

    return event_loop_run(coro)


def batched(concurrency: int, requests: int, output_tokens: int) -> dict:
    profile = SimProfile(ttft_s=0.0, itl_s=0.0, max_num_seqs=1024, events_per_write=64)
    with simulator_process(profile) as url:
        server_cpu0 = _get_json(url + "/sim/stats")["cpu_s"]
        cpu0, t0 = time.process_time(), time.perf_counter()
        result = _run(_sweep(url, concurrency, requests, output_tokens))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        server_cpu = _get_json(url + "/sim/stats")["cpu_s"] - server_cpu0
    level = result.to_dict()["levels"][0]
    tokens = level["output_tokens"]
    return {"mode": "batched", "concurrency": concurrency, "requests": requests,
            "tokens": tokens, "tokens_per_s": round(tokens / wall),
            "client_cpu_s_per_m_tokens": round(cpu / tokens * 1e6, 2),
            "client_cpu_percent": round(100 * cpu / wall, 1),
            "server_cpu_percent": round(100 * server_cpu / wall, 1),
            "peak_rss_mb": round(_rss_mb(), 1),
            "failed": level["requests"]["failed"]}


def paced(concurrency: int, requests: int, output_tokens: int) -> dict:
    profile = SimProfile(ttft_s=0.05, itl_s=0.01, batch_slowdown=0.0, max_num_seqs=1024)
    with simulator_process(profile) as url:
        server_cpu0 = _get_json(url + "/sim/stats")["cpu_s"]
        cpu0, t0 = time.process_time(), time.perf_counter()
        # Warm-up opens the connections first, so TTFT is not a connection storm.
        result = _run(_sweep(url, concurrency, requests, output_tokens, keep_records=True,
                                    warmup=concurrency))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        server_cpu = _get_json(url + "/sim/stats")["cpu_s"] - server_cpu0
        log = {str(e["request_id"]): e for e in _get_json(url + "/sim/log")}
    level = result.levels[0]
    ttft_err, end_err = [], []
    for rec in level.records or []:
        entry = log.get(str(rec.request_id))
        if entry is None or not rec.content_ns or not entry["first_content_write_ns"]:
            continue
        server_ttft = entry["first_content_write_ns"] - entry["received_ns"]
        ttft_err.append(((rec.content_ns[0] - rec.intended_ns) - server_ttft) / 1e6)
        end_err.append((rec.content_ns[-1] - entry["last_write_ns"]) / 1e6)
    summary = result.to_dict()["levels"][0]
    return {"mode": "paced", "concurrency": concurrency, "requests": requests,
            "peak_rss_mb": round(_rss_mb(), 1),
            "matched": len(ttft_err),
            "ttft_error_ms": {"p50": round(statistics.median(ttft_err), 3),
                              "p99": round(_pct(ttft_err, 99), 3), "max": round(max(ttft_err), 3)},
            "last_token_error_ms": {"p50": round(statistics.median(end_err), 3),
                                    "p99": round(_pct(end_err, 99), 3)},
            "reported_itl_ms": {"p50": summary["itl_ms"]["p50"], "p99": summary["itl_ms"]["p99"]},
            "client_cpu_percent": round(100 * cpu / wall, 1),
            "server_cpu_percent": round(100 * server_cpu / wall, 1),
            "loop_lag_ms_p99": summary["client"]["loop_lag_ms"]["p99"],
            "failed": summary["requests"]["failed"]}


def machine() -> dict:
    try:
        import uvloop  # noqa: F401
        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    loop = os.environ.get("BENCH_LOOP", loop)
    return {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "event_loop": loop}


def run_isolated(mode: str, concurrency: int, requests: int, output_tokens: int) -> dict:
    """One measurement in a fresh process, so peak RSS belongs to that measurement alone."""
    out = subprocess.run([sys.executable, __file__, "--one", mode, str(concurrency), str(requests),
                          str(output_tokens)], capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"mode": mode, "concurrency": concurrency, "error": out.stderr[-500:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, smoke only")
    parser.add_argument("--skip-sagemaker", action="store_true")
    parser.add_argument("--one", nargs=4, metavar=("MODE", "C", "N", "TOKENS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        mode, concurrency, requests, tokens = args.one
        run = batched if mode == "batched" else paced
        print(json.dumps(run(int(concurrency), int(requests), int(tokens))))
        return
    scale = 0.2 if args.quick else 1.0
    results = {"machine": machine(), "runs": []}

    def note(row: dict) -> None:
        results["runs"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    for concurrency in (1, 16, 64):
        note(run_isolated("batched", concurrency, max(concurrency, int(64 * scale)), 4096))
    # Four times as many requests: peak RSS must stay the same.
    note(run_isolated("batched", 16, int(256 * scale), 4096))
    for concurrency in (1, 64, 256):
        note(run_isolated("paced", concurrency, max(concurrency, int(2 * concurrency * scale)), 100))
    if not args.skip_sagemaker:
        script = os.path.join(os.path.dirname(__file__), "sagemaker_decode.py")
        out = subprocess.run([sys.executable, script] + (["--quick"] if args.quick else []),
                             capture_output=True, text=True, timeout=600)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        note({"mode": "sagemaker", **(json.loads(lines[-1]) if lines else
                                      {"error": out.stderr[-300:]})})
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
