"""The report's sections after the answer: overlaid plots, one table per load level (a
column per phase), the workload, and the details (phases, goodput, fidelity, the A-B-A
drift check, deployment facts, client self-check, per-phase plots, run metadata)."""

from __future__ import annotations

from .. import stats
from ..metrics import FEW_SAMPLES_MARK, FEW_SAMPLES_NOTE
from .compare import mismatch_line, token_fidelity_line
from .turns import turn_table
from .document import (
    Bullets,
    Figure,
    Paragraph,
    Section,
    Table,
    instance_type,
    is_study,
    money,
    num,
    percent,
    percentile,
    plain,
    stat,
    target_name,
)

# (row label, how to show a phase's level, the comparison's metric key or None)
LEVEL_ROWS = (
    ("completed/failed", lambda lv: f"{num(lv['requests'].get('completed'))}/"
                                    f"{num(lv['requests'].get('failed'))}", None),
    ("output tok/s", lambda lv: num(lv["output_tokens_per_s"]), "output_tokens_per_s"),
    ("requests/s", lambda lv: num(lv["requests_per_s"], 3), "requests_per_s"),
    ("decode tok/s (mean)", lambda lv: num(stat(lv, "decode_tokens_per_s", "mean"), 1),
     "decode_tokens_per_s"),
    ("$ per 1M output tokens", lambda lv: money(lv.get("cost_per_million_output_tokens")),
     "cost_per_million_output_tokens"),
    ("TTFT p50 ms", lambda lv: percentile(lv, "ttft_ms", "p50"), "ttft_ms_p50"),
    ("TTFT p90 ms", lambda lv: percentile(lv, "ttft_ms", "p90"), None),
    ("TTFT p99 ms", lambda lv: percentile(lv, "ttft_ms", "p99"), "ttft_ms_p99"),
    ("ITL p50 ms", lambda lv: percentile(lv, "itl_ms", "p50"), "itl_ms_p50"),
    ("ITL p99 ms", lambda lv: percentile(lv, "itl_ms", "p99"), "itl_ms_p99"),
    ("TPOT mean ms", lambda lv: num(stat(lv, "tpot_ms", "mean"), 2), "tpot_ms_mean"),
    ("E2E p50 ms", lambda lv: percentile(lv, "e2e_ms", "p50"), "e2e_ms_p50"),
    ("E2E p99 ms", lambda lv: percentile(lv, "e2e_ms", "p99"), None),
)


def overlaid_plots(summary: dict) -> Section:
    """Every checkpoint on the same axes."""
    blocks = [Figure("latency_throughput", "TTFT p50 against output tok/s, a line per "
                                           "checkpoint; A₁ and A₂ are separate markers"),
              Figure("cdf_ttft_ms", "TTFT distributions overlaid (HDR percentile axis), per "
                                    "load level"),
              Figure("cdf_itl_ms", "Inter-token latency distributions overlaid (HDR "
                                   "percentile axis), per load level"),
              Figure("cost", "$ per 1M output tokens by load level"),
              Figure("decode", "Single-stream decode tok/s")]
    return Section("Checkpoints side by side", blocks)


def level_tables(summary: dict) -> list[Section]:
    """One table per load level (the single stream first): a row per metric, a column per
    phase, then B/A₁ with its interval and verdict."""
    comparison = summary["comparison"] or {}
    a, b = comparison.get("baseline"), comparison.get("candidate")
    by_label = {row["label"]: row for row in comparison.get("levels") or []}
    if comparison.get("single_stream"):
        by_label["single stream"] = comparison["single_stream"]
    labels = ["single stream"] if any(p["single_stream"] for p in summary["phases"]) else []
    labels += list(dict.fromkeys(lv["label"] for p in summary["phases"] for lv in p["levels"]))
    names = [p["name"] for p in summary["phases"]]
    headers = ("metric", *names, *((f"{b} / {a} [95% CI]", "verdict") if b else ()))
    blocks: list = []
    flagged = False
    for label in labels:
        levels = [_level_of(p, label) for p in summary["phases"]]
        rows = []
        for name, show, key in LEVEL_ROWS:
            cells = tuple(show(lv) if lv else "–" for lv in levels)
            if all(c in ("–", "–/–") for c in cells):
                continue
            flagged |= any(c.endswith(FEW_SAMPLES_MARK) for c in cells)
            extra = ()
            if b:
                m = ((by_label.get(label) or {}).get("metrics") or {}).get(key) if key else None
                extra = (stats.times_text(m.get("ci") or m), m.get("text") or "–") if m else (
                    "", "")
            rows.append((name, *cells, *extra))
        if label == "single stream":
            rows += _fixed_length_rows(summary, bool(b))
        blocks += [Paragraph(label), Table(headers, tuple(rows))]
    if flagged:
        blocks.append(Paragraph(FEW_SAMPLES_NOTE))
    if blocks and b:
        blocks.insert(0, Paragraph(_verdict_note(comparison)))
    return [Section("Per load level", blocks)]


def _level_of(phase: dict, label: str) -> dict | None:
    if label == "single stream":
        return phase["single_stream"]
    return next((lv for lv in phase["levels"] if lv["label"] == label), None)


def _fixed_length_rows(summary: dict, compared: bool) -> list[tuple[str, ...]]:
    fixed = [p["fixed_length"] or {} for p in summary["phases"]]
    if not any(fixed):
        return []
    tokens = next(f["tokens"] for f in fixed if f)
    cells = tuple(f"{num(f.get('mean_s'))} ({num(f.get('min_s'))}–{num(f.get('max_s'))})"
                  if f else "–" for f in fixed)
    extra = ()
    if compared:
        m = (summary["comparison"] or {}).get("fixed_length") or {}
        extra = (stats.times_text(m.get("ci") or m) if m else "–", m.get("text") or "–")
    return [(f"{tokens}-token generation s, mean (min–max)", *cells, *extra)]


def _verdict_note(comparison: dict) -> str:
    threshold = comparison.get("threshold", stats.PRACTICAL_THRESHOLD) * 100
    return (f"Ratios are {comparison['candidate']} / {comparison['baseline']} with a 95 % "
            "percentile-bootstrap interval over the requests (seeded). Verdict: \"no practical "
            f"difference\" when the whole interval lies within ±{threshold:g} %; faster/slower "
            f"by X % when it lies wholly beyond ±{threshold:g} %; otherwise inconclusive, with "
            "the n per side that would decide it. Throughput intervals come from the "
            "per-request e2e times; a latency below the client's timing resolution is not "
            "judged.")


def workload(summary: dict) -> Section:
    work = summary.get("workload") or {}
    blocks: list = []
    if work.get("phases"):
        blocks.append(Table(("phase", "workload"), tuple(
            (name, line) for name, line in work["phases"])))
    if work.get("pairing"):
        blocks.append(Paragraph(work["pairing"]))
    lengths = work.get("output_lengths")
    if lengths:
        blocks.append(Paragraph(f"Output-length guard: answers may stop at EOS, so tokens per "
                                f"request are compared with the baseline's (flag beyond "
                                f"±{lengths['tolerance'] * 100:g} %)."))
        blocks.append(Table(("phase", "tokens/request (load)", "characters/fidelity answer",
                             "flag"), tuple(
            (r["phase"], num(r["load_tokens_per_request"], 1),
             num(r["fidelity_chars_per_answer"], 1), "differs" if r["flag"] else "–")
            for r in lengths["phases"])))
    return Section("Workload", blocks)


def drift(summary: dict) -> Section:
    check = summary["drift"]
    if not is_study(summary):
        return Section("A-B-A drift check")
    blocks: list = [Paragraph(f"Verdict: {check['sentence']}.", warning=check["ok"] is False)]
    if check["metrics"]:
        first, second = check["phases"]
        blocks.append(Paragraph(
            f"{second} / {first} per metric, pooled over the single stream and every level "
            f"(these rows decide), with 95 % bootstrap intervals; tolerance "
            f"±{check['tolerance'] * 100:g} %: within when the interval lies inside it, drift "
            "when it lies wholly outside, inconclusive otherwise."))
        rows = tuple((m["level"], m["label"], m["change"], _n(m), m["state"])
                     for m in check["metrics"] + check["levels"])
        blocks.append(Table(("level", "metric", "A₂ / A₁ − 1 [95% CI]", "n (A₁/A₂)",
                             "state"), rows))
    if check.get("excluded"):
        blocks.append(Paragraph("Not judged (below timing resolution):"))
        blocks.append(Bullets(tuple(f"{m['level']}: {m['reason']}" for m in check["excluded"])))
    return Section("A-B-A drift check", blocks)


def _n(row: dict) -> str:
    return "–" if not row.get("n") else f"{row['n'][0]}/{row['n'][1]}"


def turns(summary: dict) -> Section:
    """Multi-turn runs: a row per level and turn number (loadgen.report.turns)."""
    title, note, headers, rows = turn_table(summary, num)
    return Section(title, [Paragraph(note), Table(headers, rows)] if rows else [])


def per_phase_plots(summary: dict) -> Section:
    blocks = [Figure("throughput", "Output tokens/s by load"),
              Figure("latency_ttft_ms", "TTFT percentile distribution, a panel per phase"),
              Figure("latency_itl_ms", "Inter-token latency percentile distribution, a panel "
                                       "per phase"),
              Figure("latency_e2e_ms", "End-to-end latency percentile distribution, a panel "
                                       "per phase")]
    return Section("Per-phase plots", blocks)


def _ready(phase: dict) -> str:
    """Time to ready of the phase's server; a reused one says so (its time is the start's)."""
    seconds = phase.get("time_to_ready_s")
    if seconds is None:
        return "–"
    reused = phase["deployment"].get("server_reused")
    return num(seconds) + (" (reused)" if reused else "")


def phases(summary: dict) -> Section:
    price = summary["run"].get("price_per_hour")  # one price for the run: what cost uses
    rows = tuple((p["name"], num(p["checkpoint"]), target_name(p["target"]),
                  plain(instance_type(summary, p)), plain(price),
                  num(p["started_at"]), num(p["finished_at"]), _ready(p),
                  "simulated" if p["simulated"] else "real", p["status"])
                 for p in summary["phases"])
    headers = ("phase", "checkpoint", "target", "instance", "price $/h", "started", "finished",
               "ready after s", "data", "status")
    failures = tuple(f"{p['name']}: {p['error']}" for p in summary["phases"] if p["error"])
    blocks: list = [Table(headers, rows)] if rows else []
    if failures:
        blocks += [Paragraph("Phases that did not complete:", warning=True), Bullets(failures)]
    return Section("Phases", blocks)


def goodput(summary: dict) -> Section:
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


def fidelity(summary: dict) -> Section:
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


def deployment(summary: dict) -> Section:
    table = summary["deployment"]
    if not table:
        return Section("Deployment facts")
    headers = ("fact", *(p["name"] for p in summary["phases"]))
    rows = tuple((row["label"], *(num(v) for v in row["values"])) for row in table)
    return Section("Deployment facts", [Table(headers, rows)])


def client(summary: dict) -> Section:
    warnings = [f"{p['name']}, {lv['label']}: {lv['client']['warning'] or 'client saturated'}"
                for p in summary["phases"] for lv in p["levels"]
                if lv["client"]["saturated"] or lv["client"]["warning"]]
    blocks = [Paragraph("The load generator itself was busy enough to distort these levels' "
                        "timings:", warning=True), Bullets(tuple(warnings))] if warnings else []
    return Section("Client self-check", blocks)


def metadata(summary: dict) -> Section:
    run = summary["run"]
    rows = tuple((key, plain(value)) for key, value in run.items()
                 if not isinstance(value, dict))
    return Section("Run metadata", [Table(("field", "value"), rows)])
