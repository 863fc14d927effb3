"""Builders of results files shaped like the engine's (issue 2), with real encoded HDR
histograms, for the fidelity/compare/report tests. Numbers follow the L4 study."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hdrh.histogram import HdrHistogram

from loadgen.fidelity import (
    FidelityResult,
    generate_questions,
    score_response,
)
from loadgen.fidelity_sim import L4_SIMULATED_SEEDS, make_simulated_responder

L4_PRICE = 1.1267
# The L4 study: single-stream decode, 512-token times, throughput at 1/4/16 requests.
L4 = {
    "bf16": {"decode": 51.3, "fixed": [10.49, 10.58, 10.66],
             "throughput": {1: 45.6, 4: 171.6, 16: 619.1}},
    "qat": {"decode": 105.1, "fixed": [5.39, 5.47, 5.53],
            "throughput": {1: 85.35, 4: 328.7, 16: 1077.25}},
    "bf16-repeat": {"decode": 51.5, "fixed": [10.50, 10.57, 10.64],
                    "throughput": {1: 45.8, 4: 172.0, 16: 625.15}},
}
L4_SERVER = {
    "bf16": {"model_load_gib": 9.75, "weights_load_s": 82.75, "kv_cache_tokens": 723484,
             "in_service_s": 594.0},
    "qat": {"model_load_gib": 8.01, "weights_load_s": 66.19, "kv_cache_tokens": 867999,
            "in_service_s": 606.0},
}
# Simulated responder seeds that reproduce the study's fidelity: 37/40 each, 35 identical.
BF16_SEED, QAT_SEED = L4_SIMULATED_SEEDS["bf16"], L4_SIMULATED_SEEDS["qat"]


def _stats(hist: HdrHistogram, values: list[int], scale: float) -> dict:
    if not values:
        return dict.fromkeys(("min", "mean", "p50", "p90", "p99", "max"), None) | {"count": 0}
    # hdrh's get_mean_value walks every bucket in Python (slow); the raw mean is exact.
    return {"count": hist.get_total_count(), "min": hist.get_min_value() * scale,
            "mean": sum(values) / len(values) * scale,
            "p50": hist.get_value_at_percentile(50) * scale,
            "p90": hist.get_value_at_percentile(90) * scale,
            "p99": hist.get_value_at_percentile(99) * scale,
            "max": hist.get_max_value() * scale}


def _latencies_us(rng: random.Random, median_ms: float, n: int, spread: float) -> list[int]:
    return [int(median_ms * 1000 * rng.lognormvariate(0, spread)) for _ in range(n)]


def make_level(concurrency: int, output_tokens_per_s: float, decode_tokens_per_s: float,
               *, requests: int = 40, seed: int = 0) -> dict:
    """One level dict of a results file, histograms really encoded."""
    rng = random.Random(seed * 1000 + concurrency)
    itl_ms = 1000 / decode_tokens_per_s
    values = {  # latencies in µs, decode rates in milli-tokens/s, as the engine records
        "ttft_ms": _latencies_us(rng, 60 + 8 * concurrency, requests, 0.3),
        "itl_ms": _latencies_us(rng, itl_ms, requests * 50, 0.15),
        "tpot_ms": _latencies_us(rng, itl_ms, requests, 0.05),
        "e2e_ms": _latencies_us(rng, itl_ms * 256, requests, 0.05),
        "schedule_lag_ms": [],
        "decode_tokens_per_s": [int(decode_tokens_per_s * rng.gauss(1, 0.01) * 1000)
                                for _ in range(requests)],
    }
    hists = {}
    for name, recorded in values.items():
        high = 10_000_000_000 if name == "decode_tokens_per_s" else 3_600_000_000
        hists[name] = HdrHistogram(1, high, 3)
        for value in recorded:
            hists[name].record_value(value)
    level = {
        "load": {"mode": "concurrency", "concurrency": concurrency, "rate": None,
                 "arrival": None},
        "requests": {"completed": requests, "failed": 0, "incomplete": 0, "dropped": 0,
                     "errors": {}},
        "duration_s": requests * 256 / output_tokens_per_s,
        "output_tokens": requests * 256, "input_tokens": requests * 32,
        "output_tokens_per_s": output_tokens_per_s,
        "requests_per_s": output_tokens_per_s / 256,
        "client": {"cpu_percent": 3.0, "loop_lag_ms": {"p99": 0.4}, "saturated": False,
                   "warning": None},
    }
    for name, hist in hists.items():
        level[name] = _stats(hist, values[name], 1e-3)
    level["histograms"] = {name: hist.encode().decode("ascii") for name, hist in hists.items()}
    return level


def make_fidelity(responder_seed: int, suite_seed: int = 0) -> dict:
    respond = make_simulated_responder(responder_seed, 0.2)
    answers = tuple(score_response(q, respond(q.prompt)) for q in generate_questions(suite_seed))
    return FidelityResult(suite_seed, answers).to_dict()


def make_phase(label: str, order_index: int, profile: str, *, checkpoint: str | None = None,
               fidelity_seed: int | None = None, server: dict | None = None,
               simulated: bool = False) -> dict:
    """A scenario phase results file following the L4 study's numbers for ``profile``."""
    numbers = L4[profile]
    sweep = [make_level(c, tps, numbers["decode"] * (1 - 0.04 * i), seed=order_index)
             for i, (c, tps) in enumerate(numbers["throughput"].items())]
    single = make_level(1, numbers["decode"] * 0.9, numbers["decode"], requests=5,
                        seed=order_index + 50)
    fixed = numbers["fixed"]
    result = {
        "loadgen_version": "0.1.0",
        "target": {"url": "https://runtime.sagemaker.us-east-2.amazonaws.com", "api": "chat",
                   "model": checkpoint or label, "kind": "sagemaker"},
        "started_at": f"2025-05-01T10:{order_index * 20:02d}:00+00:00",
        "finished_at": f"2025-05-01T10:{order_index * 20 + 15:02d}:00+00:00",
        "partial": False, "simulated": simulated,
        "server": dict(server or {}),
        "phase": {"label": label, "checkpoint": checkpoint or label,
                  "order_index": order_index},
        "measurements": {
            "single_stream": single,
            "fixed_length": {"tokens": 512, "repeats": len(fixed), "e2e_s": fixed,
                             "min_s": min(fixed), "max_s": max(fixed)},
            "sweep": sweep,
        },
        "levels": sweep,
    }
    if fidelity_seed is not None:
        result["fidelity"] = make_fidelity(fidelity_seed)
    return result


def l4_study(simulated: bool = False) -> list[dict]:
    """The A-B-A study: bf16, QAT, bf16 again."""
    return [
        make_phase("bf16", 0, "bf16", checkpoint="google/gemma-4-E2B-it",
                   fidelity_seed=BF16_SEED, server=L4_SERVER["bf16"], simulated=simulated),
        make_phase("qat", 1, "qat", checkpoint="google/gemma-4-E2B-it-qat-w4a16-ct",
                   fidelity_seed=QAT_SEED, server=L4_SERVER["qat"], simulated=simulated),
        make_phase("bf16", 2, "bf16-repeat", checkpoint="google/gemma-4-E2B-it",
                   fidelity_seed=BF16_SEED, server=L4_SERVER["bf16"], simulated=simulated),
    ]


def write_study(directory: Path, phases: list[dict]) -> list[Path]:
    paths = []
    for phase in phases:
        index = phase["phase"]["order_index"]
        path = directory / f"phase-{index + 1}-{phase['phase']['label']}.json"
        path.write_text(json.dumps(phase), encoding="utf-8")
        paths.append(path)
    return paths
