"""The summary: every number a report shows, as one JSON-able dict (``summary.json``).

Input is the list of phase results files of a study (one per phase, in any
order; ``phase.order_index`` orders them), or plain ``loadgen run``/``sweep``
results files. The first phase is the baseline A₁; the first phase serving a
different checkpoint (``phase.checkpoint``, else the label) is the candidate B;
a later phase serving A₁'s checkpoint is A₂, the repeat that the drift check
compares with A₁. Ratios are B / A₁.

The renderers (Markdown, HTML, CSV) read only this dict (plus the raw
histograms for the percentile plots), so what a report says is always in
``summary.json`` too.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._version import __version__
from ..record import now_iso
from ..redact import is_secret_name
from .. import stats
from .compare import (
    DEFAULT_DRIFT_TOLERANCE,
    compare_fidelity,
    compare_fixed_length,
    compare_levels,
    compare_metric,
    dig,
    fidelity_of,
    level_label,
    ratio,
    sweep_levels,
)
from .drift import NOT_MEASURED, drift_check
from .cost import check_price, cost_per_million_tokens
from .labels import default_label, parse_labels, unique
from .workload import describe_workload, output_lengths, pairing_note, study_workload
from .server_section import knee_of, server_peaks

SCHEMA = "loadgen.summary/1"
STAT_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s",
                "schedule_lag_ms", "send_lag_ms")
# Deployment facts with a readable label (issue 4's keys); other scalar keys are shown
# under their own name.
DEPLOYMENT_LABELS = {
    "model_load_gib": "model weights (GiB)",
    "weights_load_s": "weight loading (s)",
    "model_load_s": "model loading (s)",
    "kv_cache_gib": "KV cache (GiB)",
    "kv_cache_tokens": "KV-cache capacity (tokens)",
    "max_concurrency": "max concurrency at context length",
    "max_concurrency_tokens_per_request": "tokens per request for max concurrency",
    "in_service_s": "create to InService (s)",
    "time_to_in_service_s": "create to InService (s)",
    "instance_type": "instance type",
    "vllm_version": "vLLM version",
    "time_to_ready_s": "start to ready (s)",
    "server_reused": "server reused (keep_running)",
    "server_url": "server URL",
    "server_host": "server host (ssh)",
    "server_dir": "server state and log",
    "model": "model (engine config)",
    "dtype": "dtype",
    "quantization": "quantization",
    "max_model_len": "max model length (tokens)",
    "cuda_graph_s": "CUDA-graph capture (s)",
    "cuda_graph_gib": "CUDA-graph memory (GiB)",
    "engine_init_s": "engine init: profile, KV cache, warmup (s)",
}


def build_summary(phase_results: Sequence[dict], *, price_per_hour: float | None = None,
                  run_info: dict | None = None,
                  drift_tolerance: float = DEFAULT_DRIFT_TOLERANCE,
                  files: Sequence[str] | None = None,
                  labels: str | Sequence[str] | None = None) -> dict:
    """Every number of the report. ``run_info`` adds scenario metadata (name,
    ``scenario_sha256``, ``instance_type``, ``region``, ``price_per_hour``, ...);
    ``files`` names each phase's results file, in the order given; ``labels`` names the
    phases in study order (loadgen.report.labels)."""
    run_info = dict(run_info or {})
    price = check_price(price_per_hour if price_per_hour is not None
                        else run_info.get("price_per_hour"))
    ordered = ordered_phases(phase_results, files, labels)
    phases = [_phase(name, result, file, price) for name, result, file in ordered]
    simulated = any(p["simulated"] for p in phases)
    a1, b, a2 = _roles(phases)
    comparison = _comparison(phases, ordered, a1, b) if b is not None else None
    drift = _drift(ordered, a1, a2, b, drift_tolerance)
    named = [(name, result) for name, result, _ in ordered]
    return {
        "schema": SCHEMA,
        "simulated": simulated,
        "run": _run(phases, run_info, price),
        "phases": phases,
        "roles": {"baseline": a1, "candidate": b, "baseline_repeat": a2},
        "comparison": comparison,
        "drift": drift,
        "workload": {"line": study_workload([r for _, r in named]),
                     "phases": [[name, describe_workload(r)] for name, r in named],
                     "pairing": pairing_note(named), "output_lengths": output_lengths(named)},
        "deployment": _deployment_table(phases),
    }


# --------------------------------------------------------------------------- phases


def ordered_phases(phase_results: Sequence[dict], files: Sequence[str] | None = None,
                   labels: str | Sequence[str] | None = None
                   ) -> list[tuple[str, dict, str | None]]:
    """``(name, result, file)`` in study order, names unique: a repeated label gets
    ``#1``, ``#2`` ("bf16 #1", "qat", "bf16 #2"); ``labels`` (in study order) replace the
    default ones."""
    files = list(files) if files is not None else [None] * len(phase_results)
    pairs = list(zip(phase_results, files))
    order = sorted(range(len(pairs)), key=lambda i: (_order_index(pairs[i][0], i), i))
    indexed = [pairs[i] for i in order]
    names = parse_labels(labels, len(indexed)) or [
        default_label(result, f"run {i + 1}") for i, (result, _) in enumerate(indexed)]
    return [(name, result, file) for name, (result, file) in zip(unique(names), indexed)]


def _order_index(result: dict, position: int) -> float:
    index = dig(result, ("phase", "order_index"))
    return index if isinstance(index, (int, float)) else position


def _label(result: dict, position: int) -> str:
    return default_label(result, f"run {position + 1}")


def _phase(name: str, result: dict, file: str | None, price: float | None) -> dict:
    phase = result.get("phase") or {}
    single = dig(result, ("measurements", "single_stream"))
    fidelity = fidelity_of(result)
    return {
        "name": name,
        "label": str(phase.get("label") or _label(result, 0)),
        "checkpoint": phase.get("checkpoint") or dig(result, ("target", "model")),
        "order_index": phase.get("order_index"),
        "file": file,
        "simulated": bool(result.get("simulated")),
        "partial": bool(result.get("partial")),
        # A scenario phase says how it ended (complete, failed, interrupted) and why.
        "status": phase.get("status") or ("partial" if result.get("partial") else "complete"),
        "error": phase.get("error"),
        "started_at": result.get("started_at"),
        "finished_at": result.get("finished_at"),
        "loadgen_version": result.get("loadgen_version"),
        "target": _public_target(result.get("target") or {}),
        "single_stream": _level(single, price) if single else None,
        "fixed_length": _fixed_length(dig(result, ("measurements", "fixed_length"))),
        "levels": [_level(level, price) for level in sweep_levels(result)],
        "fidelity": _fidelity_scores(fidelity) if fidelity else None,
        "deployment": _flat_facts(result.get("server") or {}),
        "knee": knee_of(result),
        "timeline": any(level.get("timeline") for level in sweep_levels(result)),
        "time_to_ready_s": _time_to_ready(result.get("server") or {}),
    }


def _time_to_ready(server: dict) -> float | None:
    """Seconds until the phase's server could be measured: a managed server's start to
    ready, or a SageMaker deployment's create to InService (None: it was already up)."""
    value = server.get("time_to_ready_s", server.get("time_to_in_service_s"))
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _public_target(target: dict) -> dict:
    return {k: v for k, v in target.items()
            if not is_secret_name(k) and isinstance(v, (str, int, float, bool, type(None)))}


def _level(level: dict, price: float | None) -> dict:
    out = {"label": level_label(level), "load": level.get("load") or {},
           "requests": level.get("requests") or {}}
    for key in ("duration_s", "output_tokens", "input_tokens", "output_tokens_per_s",
                "requests_per_s", "goodput", "turns"):
        out[key] = level.get(key)
    for metric in STAT_METRICS:
        if level.get(metric) is not None:
            out[metric] = level[metric]
    out["cloudwatch"] = cloudwatch_level_summary(level.get("cloudwatch"))
    out["cost_per_million_output_tokens"] = cost_per_million_tokens(
        price, level.get("output_tokens_per_s"))
    out["server"] = server_peaks(level)
    client = level.get("client") or {}
    out["client"] = {"saturated": bool(client.get("saturated")),
                     "warning": client.get("warning"),
                     "cpu_percent": client.get("cpu_percent")}
    return out


def cloudwatch_level_summary(cw: dict | None) -> dict | None:
    from .cloudwatch import level_summary  # it imports the document module, which imports this

    return level_summary(cw)


def _fixed_length(data: dict | None) -> dict | None:
    if not data:
        return None
    times = [t for t in data.get("e2e_s") or [] if t is not None]
    tokens = data.get("tokens")
    mean = sum(times) / len(times) if times else None
    return {"tokens": tokens, "repeats": data.get("repeats", len(times)), "e2e_s": times,
            "min_s": data.get("min_s", min(times, default=None)),
            "max_s": data.get("max_s", max(times, default=None)), "mean_s": mean,
            "tokens_per_s": tokens / mean if tokens and mean else None}


def _fidelity_scores(fidelity: Any) -> dict:
    return {"suite": fidelity.suite, "seed": fidelity.seed, "score": fidelity.score,
            "total": fidelity.total, "errors": fidelity.errors,
            "by_category": fidelity.by_category(), "logprobs": fidelity.logprobs}


def _flat_facts(server: dict, prefix: str = "") -> dict:
    """Scalar deployment facts, nested dicts flattened to dotted keys, secrets dropped."""
    out = {}
    for key, value in server.items():
        if is_secret_name(key):  # never copy a credential into a report, whatever the source
            continue
        if isinstance(value, dict):
            out.update(_flat_facts(value, f"{prefix}{key}."))
        elif isinstance(value, (str, int, float, bool)) or value is None:
            out[f"{prefix}{key}"] = value
    return out


# --------------------------------------------------------------------------- roles


def _served(phase: dict) -> str:
    """What a phase served: its checkpoint (A-B-A phases have unique labels, e.g.
    bf16-a / qat / bf16-b, but A₁ and A₂ share the checkpoint), else its label."""
    return str(phase["checkpoint"] or phase["label"])


def _roles(phases: list[dict]) -> tuple[str | None, str | None, str | None]:
    """Names of A₁, B and A₂ (None where the study has no such phase)."""
    if not phases:
        return None, None, None
    baseline = _served(phases[0])
    b_index = next((i for i, p in enumerate(phases) if _served(p) != baseline), None)
    a2 = None
    if b_index is not None:
        a2 = next((p["name"] for p in phases[b_index:] if _served(p) == baseline), None)
    elif len(phases) > 1:
        a2 = phases[1]["name"]  # A-A: a repeat with no candidate still shows drift
    b = phases[b_index]["name"] if b_index is not None else None
    return phases[0]["name"], b, a2


def _by_name(phases: list[dict], name: str) -> dict:
    return next(p for p in phases if p["name"] == name)


def _comparison(phases: list[dict], ordered: list, a_name: str, b_name: str) -> dict:
    a, b = _by_name(phases, a_name), _by_name(phases, b_name)
    raw = {name: result for name, result, _ in ordered}
    names = (a_name, b_name)
    out = {"baseline": a_name, "candidate": b_name, "threshold": stats.PRACTICAL_THRESHOLD,
           "single_stream_decode": _single_stream_ratio(raw[a_name], raw[b_name], names),
           "fixed_length": compare_fixed_length(raw[a_name], raw[b_name], names),
           "single_stream": _single_stream_row(raw[a_name], raw[b_name], names),
           "levels": compare_levels(sweep_levels(raw[a_name]), sweep_levels(raw[b_name]),
                                    names),
           "fidelity": None}
    for row in out["levels"]:
        cost_a, cost_b = _cost_at(a, row["label"]), _cost_at(b, row["label"])
        throughput = row["metrics"]["output_tokens_per_s"].get("ci")
        ci = None
        if throughput and throughput.get("ratio") and ratio(cost_a, cost_b) is not None:
            # cost per token = price / throughput: the throughput's interval, inverted
            ci = {**throughput, "ratio": ratio(cost_a, cost_b),
                  **{k: 1 / throughput[h] for k, h in (("low", "high"), ("high", "low"))
                     if throughput.get(h)}}
        row["metrics"]["cost_per_million_output_tokens"] = {
            "a": cost_a, "b": cost_b, "ratio": ratio(cost_a, cost_b), "ci": ci,
            **stats.verdict(ci, better="cost", names=names)}
    fid_a, fid_b = fidelity_of(raw[a_name]), fidelity_of(raw[b_name])
    if fid_a and fid_b:
        out["fidelity"] = compare_fidelity(fid_a, fid_b, (a_name, b_name))
    return out


def _cost_at(phase: dict, label: str) -> float | None:
    level = next((lv for lv in phase["levels"] if lv["label"] == label), None)
    return level["cost_per_million_output_tokens"] if level else None


def _single_stream_row(raw_a: dict, raw_b: dict, names: tuple[str, str]) -> dict | None:
    levels = [dig(raw, ("measurements", "single_stream")) for raw in (raw_a, raw_b)]
    return compare_levels(*([lv] for lv in levels), names)[0] if all(levels) else None


def _single_stream_ratio(raw_a: dict, raw_b: dict, names: tuple[str, str]) -> dict | None:
    levels = [dig(raw, ("measurements", "single_stream")) for raw in (raw_a, raw_b)]
    if not all(levels) or any(dig(lv, ("decode_tokens_per_s", "mean")) is None
                              for lv in levels):
        return None
    return compare_metric("decode_tokens_per_s", "higher", *levels, names,
                          stats.PRACTICAL_THRESHOLD)


# --------------------------------------------------------------------------- drift


def _drift(ordered: list, a1: str | None, a2: str | None, b: str | None,
           tolerance: float) -> dict:
    if a1 is None or a2 is None:
        return {"phases": [a1, a2], "tolerance": tolerance, "metrics": [], "levels": [],
                "excluded": [], "ok": None, "state": "not measured", "verdict": NOT_MEASURED,
                "sentence": NOT_MEASURED, "baseline_moved": None, "effect": None}
    raw = {name: result for name, result, _ in ordered}
    check = drift_check(raw[a1], raw[a2], tolerance,
                        candidate=raw[b] if b is not None else None, names=(a1, a2, b))
    return {"phases": [a1, a2], **check}


# --------------------------------------------------------------------------- metadata


def _run(phases: list[dict], run_info: dict, price: float | None) -> dict:
    started = [p["started_at"] for p in phases if p["started_at"]]
    finished = [p["finished_at"] for p in phases if p["finished_at"]]
    versions = sorted({p["loadgen_version"] for p in phases if p["loadgen_version"]})
    info = {k: v for k, v in run_info.items() if not is_secret_name(k)}
    return {**info,
            "price_per_hour": price,
            "currency": run_info.get("currency", "USD"),
            "started_at": min(started, default=None),
            "finished_at": max(finished, default=None),
            "partial": any(p["partial"] for p in phases),
            "loadgen_versions": versions,
            "report_loadgen_version": __version__,
            "generated_at": now_iso()}


def _deployment_table(phases: list[dict]) -> list[dict]:
    """Deployment facts side by side: one row per fact, one value per phase."""
    keys: list[str] = []
    for phase in phases:
        keys += [k for k in phase["deployment"] if k not in keys]
    return [{"key": key, "label": DEPLOYMENT_LABELS.get(key, key),
             "values": [phase["deployment"].get(key) for phase in phases]} for key in keys]
