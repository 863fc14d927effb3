"""The report's content as a renderer-neutral document built from a summary.

Markdown and HTML render the same sections, so both say the same thing. A
section is a title and a list of blocks: :class:`Paragraph`, :class:`Bullets`,
:class:`Table` and :class:`Figure` (a plot, by key; Markdown leaves figures to
the HTML page). Cells and texts are plain strings: each renderer escapes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..metrics import FEW_SAMPLES_MARK, FEW_SAMPLES_NOTE, few_samples
from .compare import LEVEL_METRICS, mismatch_line, token_fidelity_line
from .turns import turn_table

# The level metrics a report's comparison table shows (the JSON summary has them all).
REPORT_RATIO_METRICS = ("output_tokens_per_s", "decode_tokens_per_s", "ttft_ms_p50",
                        "itl_ms_p50", "e2e_ms_p50", "cost_per_million_output_tokens")
SIMULATED_WARNING = ("SIMULATED: these numbers come from loadgen's built-in simulator, "
                     "not from a real model or GPU. Use them to see the flow, not to decide.")


@dataclass(frozen=True)
class Paragraph:
    text: str
    warning: bool = False


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    key: str  # a plot key from loadgen.report.plots
    caption: str


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)


# --------------------------------------------------------------------------- formatting


def num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def money(value: float | None) -> str:
    return "–" if value is None else f"${value:,.2f}"


def times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def interval(ci: dict | None) -> str:
    if not ci:
        return "–"
    if ci.get("low") is None:
        return f"n too small (n={ci['n_a']}/{ci['n_b']})"
    return f"{ci['low']:.2f}–{ci['high']:.2f}× ({ci['confidence'] * 100:.0f}%, n={ci['n_a']}/{ci['n_b']})"


def _plain(value: Any) -> str:
    """Metadata as given (a price of 1.1267 must not be rounded to 1.13)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def _stat(level: dict, metric: str, key: str) -> Any:
    return (level.get(metric) or {}).get(key)


def _percentile(level: dict, metric: str, key: str) -> str:
    """A percentile cell; a p99 from too few samples is marked (loadgen.metrics.few_samples)."""
    text = num(_stat(level, metric, key), 1)
    return text + FEW_SAMPLES_MARK if few_samples(level.get(metric), key) else text


# --------------------------------------------------------------------------- sections


def build_document(summary: dict) -> tuple[str, list[Section]]:
    """The report title and its sections, in reading order."""
    from .server_section import knee_section, server_section  # they build on this module
    run = summary["run"]
    served = list(dict.fromkeys(str(p["checkpoint"]) for p in summary["phases"]
                                if p["checkpoint"]))
    name = run.get("scenario") or run.get("name") or " vs ".join(served) or "benchmark"
    title = f"loadgen report: {name}"
    if summary["simulated"]:
        title += " (SIMULATED)"
    sections = [_overview(summary), _phases(summary), _single_stream(summary),
                _throughput(summary), _latency(summary), _turns(summary), _goodput(summary),
                server_section(summary), knee_section(summary), _comparison(summary),
                _fidelity(summary), _drift(summary), _deployment(summary),
                _client(summary), _metadata(summary)]
    return title, [s for s in sections if s.blocks]


def _turns(summary: dict) -> Section:
    title, note, headers, rows = turn_table(summary, num)
    return Section(title, [Paragraph(note), Table(headers, rows)] if rows else [])


def _overview(summary: dict) -> Section:
    section = Section("Summary")
    if summary["simulated"]:
        section.blocks.append(Paragraph(SIMULATED_WARNING, warning=True))
        note = summary["run"].get("simulation_note")  # e.g. a time scale the runner applied
        if note:
            section.blocks.append(Paragraph(str(note), warning=True))
    non_streaming = [p["name"] for p in summary["phases"] if p["target"].get("stream") is False]
    if non_streaming:
        section.blocks.append(Paragraph(
            f"NON-STREAMING: {', '.join(non_streaming)} used whole responses (no token stream): "
            "their TTFT equals the end-to-end latency, and ITL/TPOT/decode rates are not "
            "measured per token.", warning=True))
    if summary["run"].get("partial"):
        section.blocks.append(Paragraph("PARTIAL: at least one phase was interrupted; its "
                                        "numbers cover only what was measured.", warning=True))
    section.blocks.append(Paragraph(_what_was_measured(summary)))
    section.blocks.append(Bullets(tuple(_headlines(summary))))
    return section


def _what_was_measured(summary: dict) -> str:
    """Names first: which model/checkpoint each phase served, where, on what, at what price."""
    phases = "; ".join(f"{p['name']}: {num(p['checkpoint'])} at {_target_name(p['target'])}"
                       for p in summary["phases"])
    instances = list(dict.fromkeys(filter(None, (_instance_type(summary, p)
                                                 for p in summary["phases"]))))
    where = f" Instance: {', '.join(instances)}." if instances else ""
    price = summary["run"].get("price_per_hour")
    cost = f" Price: ${price}/h." if price else ""
    return f"Measured: {phases}.{where}{cost}"


def _instance_type(summary: dict, phase: dict) -> str | None:
    """The instance a phase ran on: its deployment's, else the run's (scenario hardware)."""
    return phase["deployment"].get("instance_type") or summary["run"].get("instance_type")


def _headlines(summary: dict) -> list[str]:
    lines = []
    comparison = summary["comparison"]
    if comparison:
        a, b = comparison["baseline"], comparison["candidate"]
        single = comparison["single_stream_decode"]
        if single:
            ci = f", confidence interval {interval(single['ci'])}" if single["ci"] else ""
            lines.append(f"Single-stream decode: {a} {num(single['a'], 1)} tok/s → {b} "
                         f"{num(single['b'], 1)} tok/s ({times(single['ratio'])}{ci})")
        costs = [f"{row['label']}: {money(m['a'])} → {money(m['b'])}"
                 for row in comparison["levels"]
                 for m in [row["metrics"]["cost_per_million_output_tokens"]] if m["a"]]
        if costs:
            lines.append(f"$ per 1M output tokens ({a} → {b}): " + "; ".join(costs))
        fid = comparison["fidelity"]
        if fid:
            lines.append(f"Fidelity: {a} {fid['score_a']}/{fid['total']}, {b} "
                         f"{fid['score_b']}/{fid['total']}; {fid['identical']}/{fid['total']} "
                         "responses identical character for character")
    drift = summary["drift"]
    worst = f" (largest difference {percent(drift['worst'])}, tolerance " \
            f"{percent(drift['tolerance'])})" if drift.get("worst") is not None else ""
    if _is_study(summary):
        lines.append(f"A-B-A drift: {drift['verdict']}{worst}")
        return lines
    for p in summary["phases"]:  # a single run: its levels are the headline
        for level in p["levels"]:
            lines.append(f"{p['name']}, {level['label']}: {num(level['output_tokens_per_s'], 1)} "
                         f"output tok/s, TTFT p50 {num(_stat(level, 'ttft_ms', 'p50'), 1)} ms")
    return lines


def _is_study(summary: dict) -> bool:
    """A comparison study (baseline and candidate, maybe a repeat), not a single run: only
    then do comparison and A-B-A drift sections apply."""
    return summary["roles"]["candidate"] is not None or summary["roles"]["baseline_repeat"] is not None


def _target_name(target: dict) -> str:
    """What was measured: the kind of target and its SageMaker endpoint or URL."""
    parts = (target.get("kind"), target.get("endpoint") or target.get("url"))
    return " ".join(str(part) for part in parts if part) or "–"


def _ready(phase: dict) -> str:
    """Time to ready of the phase's server; a reused one says so (its time is the start's)."""
    seconds = phase.get("time_to_ready_s")
    if seconds is None:
        return "–"
    reused = phase["deployment"].get("server_reused")
    return num(seconds) + (" (reused)" if reused else "")


def _phases(summary: dict) -> Section:
    price = summary["run"].get("price_per_hour")  # one price for the run: what cost uses
    rows = tuple((p["name"], num(p["checkpoint"]), _target_name(p["target"]),
                  _plain(_instance_type(summary, p)), _plain(price),
                  num(p["started_at"]), num(p["finished_at"]), _ready(p),
                  "SIMULATED" if p["simulated"] else "real", p["status"])
                 for p in summary["phases"])
    headers = ("phase", "checkpoint", "target", "instance", "price $/h", "started", "finished",
               "ready after s", "data", "status")
    failures = tuple(f"{p['name']}: {p['error']}" for p in summary["phases"] if p["error"])
    blocks: list = [Table(headers, rows)] if rows else []
    if failures:
        blocks += [Paragraph("Phases that did not complete:", warning=True), Bullets(failures)]
    return Section("Phases", blocks)


def _single_stream(summary: dict) -> Section:
    rows = []
    for p in summary["phases"]:
        single, fixed = p["single_stream"] or {}, p["fixed_length"] or {}
        if not single and not fixed:
            continue
        rows.append((p["name"], num(_stat(single, "decode_tokens_per_s", "mean"), 1),
                     num(_stat(single, "decode_tokens_per_s", "p50"), 1),
                     num(_stat(single, "ttft_ms", "p50"), 1), num(fixed.get("tokens")),
                     num(fixed.get("min_s")), num(fixed.get("max_s")),
                     num(fixed.get("mean_s"))))
    headers = ("phase", "decode tok/s (mean)", "decode tok/s (p50)", "TTFT p50 ms",
               "fixed-length tokens", "min s", "max s", "mean s")
    blocks = [Table(headers, tuple(rows)), Figure("decode", "Single-stream decode tok/s")]
    return Section("Single-stream decode and fixed-length generations", blocks if rows else [])


def _level_rows(summary: dict, columns: Sequence) -> tuple[tuple[str, ...], ...]:
    return tuple((level["label"], p["name"], *(fmt(level) for fmt in columns))
                 for p in summary["phases"] for level in p["levels"])


def _throughput(summary: dict) -> Section:
    columns = (lambda lv: f"{num(lv['requests'].get('completed'))}/"
                          f"{num(lv['requests'].get('failed'))}",
               lambda lv: num(lv["output_tokens_per_s"]),
               lambda lv: num(lv["requests_per_s"], 3),
               lambda lv: num(_stat(lv, "decode_tokens_per_s", "mean"), 1),
               lambda lv: money(lv["cost_per_million_output_tokens"]))
    rows = _level_rows(summary, columns)
    price = summary["run"].get("price_per_hour")
    note = (f"Cost = ${price}/h ÷ (output tok/s × 3600) × 10⁶." if price else
            "No hourly price given, so no cost column values (pass --price-per-hour).")
    headers = ("level", "phase", "completed/failed", "output tok/s", "requests/s",
               "decode tok/s (mean)", "$ per 1M output tokens")
    blocks = [Table(headers, rows), Paragraph(note),
              Figure("throughput", "Output tokens/s by load"),
              Figure("cost", "$ per 1M output tokens by load")]
    return Section("Throughput and cost per level", blocks if rows else [])


def _latency(summary: dict) -> Section:
    picks = (("ttft_ms", "p50"), ("ttft_ms", "p90"), ("ttft_ms", "p99"), ("itl_ms", "p50"),
             ("itl_ms", "p90"), ("itl_ms", "p99"), ("tpot_ms", "p50"), ("e2e_ms", "p50"),
             ("e2e_ms", "p99"))
    columns = tuple((lambda lv, m=m, k=k: _percentile(lv, m, k)) for m, k in picks)
    rows = _level_rows(summary, columns)
    headers = ("level", "phase", *(f"{m.split('_')[0].upper()} {k} ms" for m, k in picks))
    flagged = any(cell.endswith(FEW_SAMPLES_MARK) for row in rows for cell in row)
    note = [Paragraph(FEW_SAMPLES_NOTE)] if flagged else []
    blocks = [Table(headers, rows), *note,
              Figure("latency_ttft_ms", "TTFT percentile distribution"),
              Figure("latency_itl_ms", "Inter-token latency percentile distribution"),
              Figure("latency_e2e_ms", "End-to-end latency percentile distribution"),
              Figure("latency_throughput", "TTFT against output tokens/s per level: where "
                                           "latency starts to climb (the knee)")]
    return Section("Latency percentiles", blocks if rows else [])


def _goodput(summary: dict) -> Section:
    """Goodput and SLOs of runs made with --slo (definitions: loadgen.slo)."""
    levels = [(p, lv) for p in summary["phases"] for lv in p["levels"] if lv.get("goodput")]
    if not levels:
        return Section("Goodput and SLOs")
    rows = []
    for phase, level in levels:
        goodput = level["goodput"]
        per_slo = "; ".join(
            f"{s['slo']}: " + (("met" if s["met"] else "MISSED") + f" ({num(s['value'], 1)})"
                              if s["kind"] == "percentile" else percent(s["pass_rate"]))
            for s in goodput["per_slo"])
        rows.append((level["label"], phase["name"], num(goodput["requests_per_s"], 3),
                     num(goodput["output_tokens_per_s"]), percent(goodput["good_fraction"]),
                     per_slo))
    headers = ("level", "phase", "goodput req/s", "goodput output tok/s", "good requests",
               "per SLO (pass rate, or percentile met)")
    note = Paragraph("A request is good when it completed and met every per-request SLO; "
                     "goodput counts good requests (and their output tokens) per second of "
                     "the level's window. Percentile SLOs judge the level.")
    return Section("Goodput and SLOs", [note, Table(headers, tuple(rows))])


def _comparison(summary: dict) -> Section:
    comparison = summary["comparison"]
    if not comparison:
        return Section("Comparison")
    a, b = comparison["baseline"], comparison["candidate"]
    rows = []
    single = comparison["single_stream_decode"]
    if single:
        rows.append(("single stream", "decode tok/s (mean)", num(single["a"]),
                     num(single["b"]), times(single["ratio"]), interval(single["ci"]),
                     num(single.get("noise"))))
    fixed = comparison["fixed_length"]
    if fixed:
        rows.append(("fixed length", "generation time s (mean)", num(fixed["a_mean_s"]),
                     num(fixed["b_mean_s"]), times(fixed["ratio"]), interval(fixed["ci"]),
                     num(fixed.get("noise"))))
    labels = {key: label for key, label, _, _ in LEVEL_METRICS}
    labels["cost_per_million_output_tokens"] = "$ per 1M output tokens"
    for row in comparison["levels"]:
        for key in REPORT_RATIO_METRICS:
            m = row["metrics"].get(key) or {"a": None, "b": None}
            if m["a"] is not None or m["b"] is not None:
                shown = money if key == "cost_per_million_output_tokens" else num
                rows.append((row["label"], labels.get(key, key), shown(m["a"]), shown(m["b"]),
                             times(m["ratio"]), interval(m.get("ci")), num(m.get("noise"))))
    note = Paragraph(f"Ratios are {b} / {a}: above 1× means {b} is higher (faster for tok/s, "
                     "slower for latencies and seconds, dearer for cost). Confidence "
                     "intervals: percentile bootstrap over requests or repeats, fixed seed, "
                     "none from fewer than 5 on a side (\"n too small\"). \"within noise\": "
                     "the difference is no larger than the A-B-A repeat moved that metric, or "
                     "the interval contains 1×.")
    headers = ("level", "metric", a, b, f"{b} / {a}", "confidence interval", "vs noise")
    return Section(f"Comparison: {b} vs {a}", [note, Table(headers, tuple(rows))])


def _fidelity(summary: dict) -> Section:
    rows = []
    for p in summary["phases"]:
        fid = p["fidelity"]
        if not fid:
            continue
        cats = fid["by_category"]
        rows.append((p["name"], f"{fid['score']}/{fid['total']}",
                     *(f"{cats[c]['correct']}/{cats[c]['total']}" if c in cats else "–"
                       for c in ("multiplication", "arithmetic", "capital")),
                     num(fid["errors"])))
    if not rows:
        return Section("Fidelity")
    headers = ("phase", "score", "multiplication", "a + b − c", "capitals", "errors")
    blocks: list = [Table(headers, tuple(rows))]
    comparison = (summary["comparison"] or {}).get("fidelity")
    if comparison:
        labels = comparison["labels"]
        blocks.append(Paragraph(f"{comparison['identical']}/{comparison['total']} responses "
                                f"of {labels[0]} and {labels[1]} are identical character for "
                                f"character; {len(comparison['mismatches'])} differ:"))
        if comparison["mismatches"]:
            blocks.append(Bullets(tuple(mismatch_line(m, labels)
                                        for m in comparison["mismatches"])))
        blocks.append(Paragraph(token_fidelity_line(comparison)))
    return Section("Fidelity (40-question suite)", blocks)


def _drift(summary: dict) -> Section:
    drift = summary["drift"]
    if not _is_study(summary):
        return Section("A-B-A drift check")
    first, second = drift["phases"]
    blocks: list = [Paragraph(f"Verdict: {drift['verdict']}.", warning=drift["ok"] is False)]
    if drift["metrics"]:
        blocks.append(Paragraph(f"{first} vs {second}: |A₂ − A₁| / A₁ per metric, "
                                f"tolerance {percent(drift['tolerance'])}."))
        rows = tuple((m["label"], num(m["a1"]), num(m["a2"]), percent(m["relative_difference"]),
                      "✓" if m["within"] else "✗ drift") for m in drift["metrics"])
        blocks.append(Table(("metric", "A₁", "A₂", "difference", "within"), rows))
    return Section("A-B-A drift check", blocks)


def _deployment(summary: dict) -> Section:
    table = summary["deployment"]
    if not table:
        return Section("Deployment facts")
    headers = ("fact", *(p["name"] for p in summary["phases"]))
    rows = tuple((row["label"], *(num(v) for v in row["values"])) for row in table)
    return Section("Deployment facts", [Table(headers, rows)])


def _client(summary: dict) -> Section:
    warnings = [f"{p['name']}, {lv['label']}: {lv['client']['warning'] or 'client saturated'}"
                for p in summary["phases"] for lv in p["levels"]
                if lv["client"]["saturated"] or lv["client"]["warning"]]
    blocks = [Paragraph("The load generator itself was busy enough to distort these levels' "
                        "timings:", warning=True), Bullets(tuple(warnings))] if warnings else []
    return Section("Client self-check", blocks)


def _metadata(summary: dict) -> Section:
    run = summary["run"]
    rows = tuple((key, _plain(value)) for key, value in run.items()
                 if not isinstance(value, dict))
    return Section("Run metadata", [Table(("field", "value"), rows)])
