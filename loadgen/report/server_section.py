"""The report's server sections: what the server did at each level (vLLM ``/metrics``:
KV cache, queue, preemptions, its own TTFT) and the knee of an SLO search.

:func:`server_peaks` and :func:`knee_of` feed the summary (one dict per level / phase);
:func:`server_section` and :func:`knee_section` turn the summary into document blocks
whose figures :mod:`loadgen.report.timeline_plots` draws.
"""

from __future__ import annotations

from typing import Any

from ..server_peaks import peaks
from .document import Figure, Paragraph, Section, Table, num

def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def server_peaks(level: dict) -> dict | None:
    """One level's server facts for the summary (None: no server series)."""
    return peaks(level.get("server_metrics"))


def knee_of(result: dict) -> dict | None:
    """The SLO search of a results file (``--profile slo-search``) or of a scenario
    phase (``measurements.knee``); None when there was none."""
    profile = result.get("profile") or {}
    if profile.get("name") == "slo-search":
        return profile
    return _dig(result, "measurements", "knee_search")


def server_state(peaks: dict | None) -> str:
    """What the server was doing during a level, in words."""
    if not peaks:
        return "no server metrics"
    parts = []
    if peaks.get("kv_peak_percent") is not None:
        parts.append(f"KV cache peaked at {peaks['kv_peak_percent']:g} %")
    if peaks.get("waiting_peak") is not None:
        trend = "growing" if peaks.get("waiting_growing") else "not growing"
        parts.append(f"queue peaked at {peaks['waiting_peak']:g} waiting ({trend})")
    if peaks.get("preemptions") is not None:
        parts.append(f"{peaks['preemptions']:g} preemptions")
    return ", ".join(parts) or "no server metrics"


def server_section(summary: dict) -> Section:
    rows = []
    for p in summary["phases"]:
        for lv in p["levels"]:
            peaks = lv.get("server")
            if peaks:
                rows.append((lv["label"], p["name"], num(peaks["kv_peak_percent"], 1),
                             num(peaks["waiting_peak"], 0), num(peaks["running_peak"], 0),
                             num(peaks["preemptions"], 0), num(peaks["server_ttft_mean_ms"], 1),
                             num(peaks["client_minus_server_ttft_ms"], 1)))
    blocks: list = []
    if rows:
        headers = ("level", "phase", "KV peak %", "waiting peak", "running peak", "preempt",
                   "server TTFT mean ms", "client − server TTFT ms")
        blocks += [Table(headers, tuple(rows)), Paragraph(
            "From vLLM's /metrics, sampled once a second on the client's monotonic clock. "
            "Client − server TTFT: the client's mean TTFT minus vLLM's own "
            "(vllm:time_to_first_token_seconds over the level), the network's and the "
            "client's share.")]
    for i, p in enumerate(summary["phases"]):
        if p.get("timeline"):
            blocks.append(Figure(f"timeline_{i}", f"{p['name']}: client and server per "
                                 "second, levels end to end"))
    if len(summary["phases"]) >= 2 and rows:
        blocks.append(Figure("ab_server", "KV-cache usage and waiting requests, phases "
                                          "overlaid (levels end to end)"))
    return Section("Server timeline", blocks)


def knee_section(summary: dict) -> Section:
    blocks: list = []
    for i, p in enumerate(summary["phases"]):
        knee = p.get("knee")
        if not knee:
            continue
        unit = "concurrency" if knee["mode"] == "concurrency" else "requests/s"
        low, high = knee["bracket"]
        text = (f"{p['name']}: the highest {unit} meeting {', '.join(knee['slos'])} is "
                f"{num(knee['knee'], 2)}" + (f" ({num(high, 2)} failed)" if high is not None
                                             else " (no probe failed)")
                + f"; search stopped: {knee.get('stopped') or 'run ended'}.")
        blocks.append(Paragraph(text))
        by_load = {probe["load"]: probe for probe in knee["probes"]}
        for what, value in (("At the knee", low), ("Above it", high)):
            if value is not None and value in by_load:
                blocks.append(Paragraph(f"{what} ({num(value, 2)}): "
                                        f"{server_state(by_load[value].get('server'))}."))
        rows = tuple((str(n), num(probe["load"], 2), num(probe["goodput_requests_per_s"], 2),
                      "pass" if probe["passed"] else "FAIL", "; ".join(probe["failing"]) or "–")
                     for n, probe in enumerate(knee["probes"], 1))
        blocks += [Table(("probe", unit, "goodput req/s", "verdict", "failing"), rows),
                   Figure(f"knee_{i}", f"{p['name']}: goodput and SLO metrics by load, "
                                       "knee marked")]
    knees = [(p["name"], p["knee"]) for p in summary["phases"] if p.get("knee")]
    if len(knees) >= 2:
        blocks.insert(0, Paragraph("; ".join(f"{name} holds the SLOs up to "
                                             f"{num(k['knee'], 2)}" for name, k in knees) + "."))
    return Section("The knee: highest load meeting the SLOs", blocks)
