"""The workload in one line: what a run or a study sent (the report's and the CLI tables'
header), where its phases are paired, and the output-length guard.

Output-length guard (MLPerf's rule): when answers may stop at EOS (``ignore_eos`` off, or
fidelity answers, which always may), a checkpoint that answers shorter is faster for the
wrong reason. Tokens per request are reported per phase, and a candidate whose mean differs
from the baseline's by more than ±10 % is flagged.
"""

from __future__ import annotations

from ..workload.prompts import DEFAULT_OUTPUT_TOKENS
from .compare import dig, sweep_levels

LENGTH_TOLERANCE = 0.10  # MLPerf: output lengths within ±10 %


def _yes(value) -> str:
    return {True: "yes", False: "no"}.get(value, "?")


def describe_workload(result: dict) -> str:
    """One line: api, input/output tokens, prompts (dataset, trace or synthetic, seed),
    requests per measurement, ignore_eos."""
    work = result.get("workload") or {}
    target = result.get("target") or {}
    api = work.get("api") or target.get("api") or "?"
    if "single_stream" in work or "sweep" in work:  # a scenario phase
        parts = [f"{api} API", f"{work.get('input_tokens')} input tokens",
                 f"{work.get('prompts') or 'synthetic'} prompts (seed {work.get('seed')})"]
        single, fixed, sweep = work.get("single_stream"), work.get("fixed_length"), work.get(
            "sweep")
        if single:
            parts.append(f"single stream {single['requests']}×{single['output_tokens']} "
                         "output tokens")
        if fixed:
            parts.append(f"fixed length {fixed['repeats']}×{fixed['output_tokens']}")
        if sweep:
            counts = "/".join(str(n) for n in sweep["requests"])
            parts.append(f"sweep concurrency {'/'.join(map(str, sweep['concurrency']))} "
                         f"({counts} requests, {sweep['output_tokens']} output tokens)")
        if work.get("fidelity"):
            parts.append(f"fidelity 40 questions (seed {work['fidelity']['seed']})")
        parts.append(f"ignore_eos {_yes(work.get('ignore_eos'))}")
        return "; ".join(parts)
    requests = sum(dig(level, ("requests", "completed")) or 0 for level in sweep_levels(result))
    if not work:
        return f"{api} API; {requests} requests completed (the results file does not record its " \
               "workload)"
    source = "synthetic"
    if work.get("dataset"):
        source = f"dataset {work['dataset'].get('path')}"
    elif work.get("trace"):
        source = f"trace {work['trace'].get('path')} x{work['trace'].get('speedup')}"
    output = work.get("output_tokens")
    if output is None:  # not given: a dataset row's own max_tokens, else the default
        output = f"per-row (else {DEFAULT_OUTPUT_TOKENS})" if work.get("dataset") or work.get(
            "trace") else DEFAULT_OUTPUT_TOKENS
    parts = [f"{api} API", f"{work.get('input_tokens', '?')} input tokens",
             f"{output} output tokens",
             f"{source} prompts (seed {work.get('seed', '?')})",
             f"{requests} requests completed"]
    if "ignore_eos" in target:
        parts.append(f"ignore_eos {_yes(target['ignore_eos'])}")
    return "; ".join(parts)


def study_workload(results: list[dict]) -> str:
    """The study's workload: one line when every phase sent the same, else each's."""
    lines = list(dict.fromkeys(describe_workload(r) for r in results))
    return lines[0] if len(lines) == 1 else " | ".join(lines)


def pairing_note(results: list[tuple[str, dict]]) -> str:
    """Where the phases are paired, and where pairing is not possible."""
    works = [r.get("workload") or {} for _, r in results]
    if not results:
        return ""
    if all(w.get("paired") for w in works):
        note = ("Paired: every phase sent the same prompts in the same order (seeded); "
                "fidelity compares answers question by question. Load intervals are "
                "bootstraps over each phase's per-request histograms (per-request records are "
                "not kept, so they are not per-prompt differences).")
    else:
        note = ("Not paired: these runs drew their own prompts (plain runs salt prompts per "
                "run); intervals compare the per-request distributions.")
    urls: dict[str, list[str]] = {}
    for name, result in results:
        url = dig(result, ("target", "url")) or dig(result, ("target", "endpoint"))
        if url and not result.get("simulated"):
            urls.setdefault(url, []).append(name)
    shared = [names for names in urls.values() if len(names) > 1]
    for names in shared:
        note += (f" {', '.join(names)} share one server: a prefix cache may answer a repeated "
                 "prompt faster (TTFT), so those phases are not independent.")
    return note


def output_lengths(results: list[tuple[str, dict]]) -> dict | None:
    """Tokens per request of each phase where answers may stop at EOS (the load levels
    when ``ignore_eos`` is off; the fidelity answers always, in characters), and the flag."""
    rows = []
    for name, result in results:
        # A scenario phase records ignore_eos in its workload; a run, with its target.
        eos = (result.get("workload") or {}).get("ignore_eos",
                                                 (result.get("target") or {}).get("ignore_eos"))
        may_stop = eos is False
        fidelity = result.get("fidelity") or {}
        tokens = requests = 0
        if may_stop:
            for level in sweep_levels(result):
                tokens += level.get("output_tokens") or 0
                requests += dig(level, ("requests", "completed")) or 0
        # Fidelity answers keep their text, not a token count: characters stand in for it.
        fid_chars = [len(a["response"]) for a in fidelity.get("answers") or []
                     if isinstance(a, dict) and a.get("response")]
        rows.append({"phase": name, "load_tokens_per_request":
                     tokens / requests if requests else None,
                     "fidelity_chars_per_answer":
                     sum(fid_chars) / len(fid_chars) if fid_chars else None})
    if not any(r["load_tokens_per_request"] or r["fidelity_chars_per_answer"] for r in rows):
        return None
    base = rows[0]
    for row in rows:
        row["flag"] = any(
            base[key] and row[key] and abs(row[key] / base[key] - 1) > LENGTH_TOLERANCE
            for key in ("load_tokens_per_request", "fidelity_chars_per_answer"))
    return {"tolerance": LENGTH_TOLERANCE, "phases": rows,
            "flagged": [r["phase"] for r in rows if r["flag"]]}
