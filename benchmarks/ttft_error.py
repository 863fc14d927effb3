"""TTFT error a user suffers, loadgen vs the physical-limit raw client, interleaved.

    python benchmarks/ttft_error.py                  # c=64, 256, 1024; 3 rounds (~12 min)
    python benchmarks/ttft_error.py --quick          # c=64 and 256, 1 round
    chrt -f 50 python benchmarks/ttft_error.py       # real-time priority on a shared machine
    python benchmarks/ttft_error.py --clients raw,http,http@/tmp/old-tree   # another tree

Every round runs every client once per concurrency, in an order rotated each round, so
loadgen and the raw client see the same minutes of a noisy machine; each line of the
summary is a client's ratio to the raw client **of the same round**, median [min-max]
over the rounds, so a noisy machine shows in the spread instead of hiding in one number.
Each run records the machine's 1-minute load average and the hypervisor's steal time
(``/proc/stat``) over it.

Clients: ``raw`` (``raw_client.py``), ``http`` / ``sagemaker`` (loadgen's streaming
transport, ``--workers 1``), ``http-auto`` / ``sagemaker-auto`` (``--workers auto``: run
only where auto chooses more than one process on this machine), ``aiohttp`` /
``sagemaker-aiohttp``; ``CLIENT@PATH`` imports loadgen from another tree.

For each run: ``reference_server.py`` pinned to core 0, the client in its own process
pinned to core 1 (when there are two cores; ``-auto`` clients are not pinned: auto counts
the cores they may use), closed loop, TTFT 50 ms, one warm-up request per stream (every
connection opened and used once), then ``--per-stream`` measured requests per stream.
Per request, matched by ``X-Request-Id``:

    TTFT error = (client: first token seen - intended send) - (server: first write - request read)

so a request that left the client late is charged to the client. ITL error compares the
distribution of the client's gaps between token reads with the server's gaps between writes
(p50 and p99). CPU is the client process's CPU over the measured requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)


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
                sagemaker: bool = False, workers: int | str = 1) -> dict:
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
            prompts=loadgen.PromptSource(8, tokens), server_metrics_interval_s=None,
            workers=workers)

    result = _event_loop_run()(sweep())
    level = result.levels[0]
    rows = [(r.request_id, r.intended_ns, r.content_ns[0] if r.content_ns else 0, r.content_ns)
            for r in level.records or []]
    summary = result.to_dict()["levels"][0]
    client = summary["client"]
    workers_used = len(summary.get("workers") or []) or 1
    return {**_score(url, rows), "client_cpu_percent": client["cpu_percent"],
            "client_cpu_s": round(client["cpu_percent"] / 100 * summary["duration_s"], 2),
            "failed": summary["requests"]["failed"], "workers": workers_used,
            "fast_path_sends": (summary.get("connections") or {}).get("sent_on_completion"),
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


def machine_state() -> tuple[float, int, int]:
    """(1-minute load average, steal ticks, all ticks) now."""
    load1 = os.getloadavg()[0]
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        return load1, fields[7] if len(fields) > 7 else 0, sum(fields[:8])
    except OSError:
        return load1, 0, 0


def one(client: str, concurrency: int, per_stream: int, tokens: int, itl_ms: float) -> dict:
    """Start the reference server, run one client against it in a child process."""
    name, _, tree = client.partition("@")
    extra = ["--sagemaker"] if name.startswith("sagemaker") else []
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "reference_server.py"),
                               "--ttft-ms", "50", "--itl-ms", str(itl_ms), *extra],
                              stdout=subprocess.PIPE,
                              text=True, preexec_fn=lambda: _pin(0))
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree or ROOT))
    load0, steal0, total0 = machine_state()
    try:
        url = server.stdout.readline().strip()
        child = subprocess.run([sys.executable, __file__, "--one", name, url, str(concurrency),
                                str(per_stream), str(tokens)], capture_output=True, text=True,
                               timeout=900, env=env)
        lines = [ln for ln in child.stdout.splitlines() if ln.startswith("{")]
        load1, steal1, total1 = machine_state()
        state = {"load1": round(max(load0, load1), 2),
                 "steal_percent": round(100 * (steal1 - steal0) / max(1, total1 - total0), 1)}
        if child.returncode or not lines:
            return {"client": client, "concurrency": concurrency, **state,
                    "error": child.stderr[-600:]}
        return {"client": client, "concurrency": concurrency, "itl_ms": itl_ms, **state,
                **json.loads(lines[-1])}
    finally:
        server.terminate()
        server.wait(10)


def auto_choice(concurrency: int) -> int:
    """What --workers auto chooses for ``concurrency`` on this machine (0: unknown)."""
    try:
        from loadgen.load import ConstantConcurrency
        from loadgen.runconfig import choose_workers, cpu_affinity
    except ImportError:
        return 0
    return choose_workers([ConstantConcurrency(concurrency)], os.cpu_count() or 1,
                          cpu_affinity()).workers


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def summary(rows: list[dict]) -> str:
    """A Markdown table: per concurrency and client, TTFT error p50/p99 (median over the
    rounds) and the ratio to the raw client of the same round, median [min-max]."""
    out = ["| c | client | TTFT err p50 / p99 ms (median) | ratio to raw p50 | ratio to raw p99 "
           "| ITL err p99 ms | send lag p99 ms | CPU % | load1 | steal % | runs |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    levels = sorted({r["concurrency"] for r in rows})
    for c in levels:
        at = [r for r in rows if r["concurrency"] == c and "error" not in r]
        raw = {r["round"]: r for r in at if r["client"] == "raw"}
        for client in dict.fromkeys(r["client"] for r in at):
            runs = [r for r in at if r["client"] == client]
            p50 = [r["ttft_error_ms"]["p50"] for r in runs]
            p99 = [r["ttft_error_ms"]["p99"] for r in runs]
            r50 = [r["ttft_error_ms"]["p50"] / raw[r["round"]]["ttft_error_ms"]["p50"]
                   for r in runs if r["round"] in raw and raw[r["round"]]["ttft_error_ms"]["p50"] > 0]
            r99 = [r["ttft_error_ms"]["p99"] / raw[r["round"]]["ttft_error_ms"]["p99"]
                   for r in runs if r["round"] in raw and raw[r["round"]]["ttft_error_ms"]["p99"] > 0]
            lag = [r["send_lag_ms"]["p99"] for r in runs if r.get("send_lag_ms")]
            workers = {r.get("workers", 1) for r in runs}
            label = client + (f" ({'/'.join(map(str, sorted(workers)))} proc)"
                              if workers != {1} else "")
            loads = [r["load1"] for r in runs]
            cells = [str(c), label,
                     f"{statistics.median(p50):.1f} / {statistics.median(p99):.1f}",
                     _spread(r50) if client != "raw" else "1",
                     _spread(r99) if client != "raw" else "1",
                     f"{statistics.median(r['itl_error_ms']['p99'] for r in runs):.2f}",
                     f"{statistics.median(lag):.1f}" if lag else "-",
                     f"{statistics.median(r['client_cpu_percent'] for r in runs):.0f}",
                     f"{min(loads):.1f}-{max(loads):.1f}",
                     f"{max(r['steal_percent'] for r in runs):.1f}", str(len(runs))]
            out.append("| " + " | ".join(cells) + " |")
    failed = [r for r in rows if "error" in r]
    if failed:
        out.append(f"\n{len(failed)} run(s) failed: " + "; ".join(
            f"{r['client']} c={r['concurrency']}: {r['error'].strip().splitlines()[-1:]}"
            for r in failed))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", default="raw,http,http-auto,sagemaker,sagemaker-auto",
                        help="raw, http, http-auto, sagemaker, sagemaker-auto, aiohttp, "
                        "sagemaker-aiohttp; CLIENT@PATH: loadgen imported from PATH")
    parser.add_argument("--concurrency", default=None, help="comma-separated levels")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--per-stream", type=int, default=2,
                        help="measured requests per stream in a run")
    parser.add_argument("--tokens", default="300,300,100", help="tokens per response, per level")
    parser.add_argument("--itl-ms", default="10,10,40", help="server ITL per concurrency level "
                        "(the single-core reference server writes about 25k events/s at most: "
                        "1024 streams need 40 ms)")
    parser.add_argument("--json", help="also write every run here")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        client, url, concurrency, per_stream, tokens = args.one
        auto = client.endswith("-auto")
        if not auto:
            _pin(1)
        client = client.removesuffix("-auto")
        workers = "auto" if auto else 1
        if client == "raw":
            row = run_raw(url, int(concurrency), int(per_stream), int(tokens))
        elif client.startswith("sagemaker"):  # sagemaker (stream transport), sagemaker-aiohttp
            transport = client.partition("-")[2] or "stream"
            row = run_loadgen(url, int(concurrency), int(per_stream), int(tokens), transport,
                              True, workers)
        else:
            transport = "stream" if client == "http" else client
            row = run_loadgen(url, int(concurrency), int(per_stream), int(tokens), transport,
                              workers=workers)
        row["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(row))
        return
    levels = [int(c) for c in (args.concurrency or ("64,256" if args.quick else "64,256,1024"))
              .split(",")]
    rounds = args.rounds or (1 if args.quick else 3)
    itls = [float(x) for x in args.itl_ms.split(",")]
    tokens = [int(x) for x in args.tokens.split(",")]
    clients = args.clients.split(",")
    rows = []
    for i, concurrency in enumerate(levels):
        here = [c for c in clients if not c.partition("@")[0].endswith("-auto")
                or auto_choice(concurrency) > 1]
        for round_ in range(rounds):
            order = here[round_ % len(here):] + here[:round_ % len(here)]
            for client in order:
                row = one(client, concurrency, args.per_stream, tokens[min(i, len(tokens) - 1)],
                          itls[min(i, len(itls) - 1)])
                row["round"] = round_
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "cores": os.cpu_count(), "rounds": rounds, "per_stream": args.per_stream,
              "runs": rows}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    print(f"{report['date']}, {os.cpu_count()} cores, {rounds} rounds, "
          f"{args.per_stream} measured requests per stream\n")
    print(summary(rows))


if __name__ == "__main__":
    main()
