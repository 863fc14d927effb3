"""Worker processes benchmark: one command, prints a JSON document and a summary.

    python benchmarks/workers.py            # full run (a few minutes on 2 cores)
    python benchmarks/workers.py --quick    # smoke run

Against the built-in simulator in its own process; every measurement in a fresh process,
so the CPU figures are that run's alone:

1. *throughput*: batched streaming (the simulator writes 64 SSE events per socket write,
   as fast as read), 4,096-token streams at concurrency 64: tokens/s and client
   CPU-seconds per million tokens (parent + workers: ``RUSAGE_CHILDREN`` counts the
   reaped workers; and inside the measured window alone, from each process's
   self-check) for one process, one worker process behind the pool (the cost of
   IPC, progress reports and merging alone) and two worker processes. The simulator's
   own CPU says when it, not the client, is the bottleneck.
2. *accuracy*: paced streaming (TTFT 50 ms, ITL 10 ms, 100 tokens) at concurrency 512
   and 1024 with 1 and 2 workers. TTFT error = client first-content timestamp − the
   simulator's write of that chunk, matched by ``X-Request-Id`` (both CLOCK_MONOTONIC).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request

import loadgen
from loadgen.api import run_config
from loadgen.engine import RunControl
from loadgen.runconfig import RunConfig, TargetConfig
from loadgen.simulator import SimProfile, simulator_process

BATCHED = SimProfile(ttft_s=0.0, itl_s=0.0, max_num_seqs=1024, events_per_write=64)
PACED = SimProfile(ttft_s=0.05, itl_s=0.01, batch_slowdown=0.0, max_num_seqs=4096)


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.loads(reply.read())


def _cpu_s() -> float:
    """CPU of this process and of its reaped children (the worker processes)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def _loop(coro):
    from loadgen.cli.common import event_loop_run

    return event_loop_run(coro)


async def _one_worker_via_pool(config: RunConfig):
    """The pool with a single worker process: everything ``--workers`` adds, on one engine."""
    from loadgen.workers import worker_pool

    async with worker_pool(config, 1, keep_records=False) as pool:
        return await pool.level(0, config.loads[0], config.stop, RunControl())


def _measure(url: str, mode: str, concurrency: int, requests: int) -> dict:
    """One run of ``mode``: its CPU (this process + reaped workers), tokens, window."""
    workers = {"process": 1, "pool-1": 1, "workers-2": 2}[mode]
    config = RunConfig(loads=(loadgen.ConstantConcurrency(concurrency),),
                       stop=loadgen.StopRule(requests=requests),
                       target=TargetConfig(url), prompts=loadgen.PromptSource(32, 4096),
                       server_metrics_interval_s=None, workers=workers)
    server0, cpu0, t0 = _get_json(url + "/sim/stats")["cpu_s"], _cpu_s(), time.perf_counter()
    parent0 = time.process_time()
    if mode == "pool-1":
        level = _loop(_one_worker_via_pool(config))
    else:
        level = _loop(run_config(config)).levels[0]
    # CPU inside the measured window only, from each generating process's self-check
    # (the reports and histogram encoding run there); plus the coordinating parent's.
    clients = [w["client"] for w in level.workers] if level.workers else [level.client.to_dict()]
    level_cpu = sum(c["cpu_percent"] for c in clients) / 100 * level.duration_s
    if level.workers:
        level_cpu += time.process_time() - parent0
    return {"cpu_s": _cpu_s() - cpu0, "wall_s": time.perf_counter() - t0,
            "level_cpu_s": level_cpu,
            "server_cpu_s": _get_json(url + "/sim/stats")["cpu_s"] - server0,
            "tokens": level.metrics.counts.output_tokens, "failed": level.metrics.counts.failed,
            "window_s": level.duration_s}


def throughput(mode: str, concurrency: int, requests: int) -> dict:
    """Steady-state cost by difference: a run of ``concurrency + requests`` requests minus
    a run of ``concurrency`` (one per stream), so the fixed costs (starting interpreters,
    opening connections, preflight) cancel out; they are reported separately."""
    with simulator_process(BATCHED) as url:
        small = _measure(url, mode, concurrency, concurrency)
        big = _measure(url, mode, concurrency, concurrency + requests)
    tokens = big["tokens"] - small["tokens"]
    cpu, wall = big["cpu_s"] - small["cpu_s"], big["wall_s"] - small["wall_s"]
    return {"bench": "throughput", "mode": mode, "concurrency": concurrency,
            "tokens": tokens, "failed": small["failed"] + big["failed"],
            "tokens_per_s": round(tokens / wall),
            "level_tokens_per_s": round(big["tokens"] / big["window_s"]),
            "client_cpu_s_per_m_tokens": round(cpu / tokens * 1e6, 2),
            "level_cpu_s_per_m_tokens": round(big["level_cpu_s"] / big["tokens"] * 1e6, 2),
            "client_cpu_percent": round(100 * cpu / wall, 1),
            "server_cpu_percent": round(100 * (big["server_cpu_s"] - small["server_cpu_s"])
                                        / wall, 1),
            "fixed_cost_cpu_s": round(small["cpu_s"] - cpu * small["tokens"] / tokens, 2),
            "fixed_cost_wall_s": round(small["wall_s"] - wall * small["tokens"] / tokens, 2)}


def accuracy(workers: int, concurrency: int) -> dict:
    with simulator_process(PACED) as url:
        config = RunConfig(loads=(loadgen.ConstantConcurrency(concurrency),),
                           # Warm-up opens every connection first: TTFT is not a connect storm.
                           stop=loadgen.StopRule(requests=concurrency, warmup=concurrency),
                           target=TargetConfig(url), prompts=loadgen.PromptSource(32, 100),
                           server_metrics_interval_s=None, workers=workers)
        cpu0, t0 = _cpu_s(), time.perf_counter()
        result = _loop(run_config(config, keep_records=True))
        cpu, wall = _cpu_s() - cpu0, time.perf_counter() - t0
        log = {str(e["request_id"]): e for e in _get_json(url + "/sim/log")}
    level = result.levels[0]
    errors = []
    for rec in level.records or []:
        entry = log.get(str(rec.request_id))
        if entry and rec.content_ns and entry["first_content_write_ns"]:
            errors.append((rec.content_ns[0] - entry["first_content_write_ns"]) / 1e6)
    data = result.to_dict()["levels"][0]
    return {"bench": "accuracy", "workers": workers, "concurrency": concurrency,
            "completed": data["requests"]["completed"], "partial": result.partial,
            "matched": len(errors), "failed": data["requests"]["failed"],
            "ttft_error_ms": {"p50": round(statistics.median(errors), 3),
                              "p99": round(_pct(errors, 99), 3), "max": round(max(errors), 3)}
            if errors else None,
            "client_cpu_percent": round(100 * cpu / wall, 1),
            "loop_lag_ms_p99": data["client"]["loop_lag_ms"]["p99"],
            "saturated": data["client"]["saturated"]}


def machine() -> dict:
    """benchmarks/run.py's description, plus how busy the (shared) machine was."""
    from run import (
        machine as described,  # this folder is on sys.path when run as a script
    )

    return {**described(), "time_utc": time.strftime("%H:%M", time.gmtime()),
            "load_average_1min_at_start": round(os.getloadavg()[0], 2)}


def isolated(*args: str) -> dict:
    """One measurement in a fresh process."""
    done = subprocess.run([sys.executable, __file__, "--one", *args], capture_output=True,
                          text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"args": args, "error": done.stderr[-800:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, smoke only")
    parser.add_argument("--repeats", type=int, default=2, help="throughput runs per mode")
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, *rest = args.one
        row = throughput(rest[0], int(rest[1]), int(rest[2])) if kind == "throughput" else \
            accuracy(int(rest[0]), int(rest[1]))
        print(json.dumps(row))
        return
    results = {"machine": machine(), "runs": []}

    def note(row: dict) -> None:
        results["runs"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    requests = 64 if args.quick else 512
    for _ in range(1 if args.quick else args.repeats):
        for mode in ("process", "pool-1", "workers-2"):
            note(isolated("throughput", mode, "64", str(requests)))
    for concurrency in ((128,) if args.quick else (512, 1024)):
        for workers in (1, 2):
            note(isolated("accuracy", str(workers), str(concurrency)))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
