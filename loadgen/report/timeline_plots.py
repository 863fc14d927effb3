"""Timeline and knee figures: per phase, stacked panels sharing the time axis (client and
server per second, levels end to end); in an A/B study, the phases' KV-cache and waiting
curves overlaid; for an SLO search, goodput and each SLO metric by load with the knee.

Same conventions as :mod:`.plots` (object API, Agg canvas, no pyplot).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .compare import sweep_levels
from .plots import _color, _finish, _text
from .server_section import knee_of


def _stack(title: str, simulated: bool, n: int, sharex: bool = True) -> tuple[Figure, list]:
    fig = Figure(figsize=(9, 1.9 * n + 1), dpi=100)
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(n, 1, sharex=sharex, squeeze=False)[:, 0])
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(_text(f"{title} — SIMULATED" if simulated else title))
    if simulated:
        fig.text(0.01, 0.99, "SIMULATED DATA", color="red", ha="left", va="top",
                 fontsize=9, fontweight="bold")
    return fig, axes


def _end_to_end(levels: Sequence[dict]) -> list[tuple[float, dict, dict, dict]]:
    """``(x0, level, client columns, server samples shifted onto the client axis)`` with
    each level placed after the previous one."""
    out, x0 = [], 0.0
    for level in levels:
        timeline = level.get("timeline") or {}
        client = timeline.get("columns") or {}
        server = dict((level.get("server_metrics") or {}).get("samples") or {})
        offset = ((timeline.get("sources") or {}).get("server_metrics") or {}).get("offset_s", 0.0)
        if server.get("t_s"):
            server["t_s"] = [t + offset for t in server["t_s"]]
        out.append((x0, level, client, server))
        ends = [client["t_s"][-1] + timeline.get("interval_s", 1.0)] if client.get("t_s") else []
        ends += [server["t_s"][-1]] if server.get("t_s") else []
        x0 += max(ends + [level.get("duration_s") or 0.0])
    return out


def _series(placed: list, side: str, name: str) -> tuple[list[float], list[float]]:
    """One column of every level, end to end; a gap (NaN) between levels, so no line
    joins the end of one level to the start of the next."""
    xs: list[float] = []
    ys: list[float] = []
    for x0, _, client, server in placed:
        columns = client if side == "client" else server
        points = [(x0 + t, v * (100 if name == "kv_cache_usage_perc" else 1))
                  for t, v in zip(columns.get("t_s") or [], columns.get(name) or [])
                  if v is not None]
        if points and xs:
            xs.append(points[0][0])
            ys.append(math.nan)
        xs += [x for x, _ in points]
        ys += [y for _, y in points]
    return xs, ys


# (panel title, y label, [(side, column, legend, style)])
_PANELS = (
    ("throughput", "tokens/s", [("client", "output_tokens_per_s", "client output tok/s", "-"),
                                ("server", "generation_tokens_per_s", "server generated tok/s",
                                 "--")]),
    ("TTFT", "ms", [("client", "ttft_ms_p50", "TTFT p50", "-"),
                    ("client", "ttft_ms_p99", "TTFT p99", "--")]),
    ("requests", "requests", [("server", "num_requests_running", "server running", "-"),
                              ("server", "num_requests_waiting", "server waiting", "--"),
                              ("client", "in_flight", "client in flight", ":")]),
    ("KV cache", "% used", [("server", "kv_cache_usage_perc", "KV cache usage", "-")]),
    ("preemptions", "per s", [("server", "preemptions_per_s", "preemptions/s", "-")]),
)


def timeline_figure(name: str, result: dict, simulated: bool) -> Figure | None:
    """One phase: the stacked panels that have data, level boundaries marked."""
    placed = _end_to_end(sweep_levels(result))
    panels = []
    for title, unit, lines in _PANELS:
        drawn = [(legend, style, *_series(placed, side, column))
                 for side, column, legend, style in lines]
        drawn = [d for d in drawn if d[2]]
        if drawn:
            panels.append((title, unit, drawn))
    if not panels:
        return None
    fig, axes = _stack(f"{name}: timeline", simulated, len(panels))
    for ax, (title, unit, drawn) in zip(axes, panels):
        for j, (legend, style, xs, ys) in enumerate(drawn):
            ax.plot(xs, ys, linestyle=style, marker=".", markersize=3, color=_color(j),
                    label=_text(legend))
        ax.set_ylabel(_text(unit))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="best")
        for x0, level, _, _ in placed:
            ax.axvline(x0, color="grey", linewidth=0.6, alpha=0.6)
    for x0, level, _, _ in placed:
        label = (level.get("load") or {})
        axes[0].annotate(_text(_load_text(label)), (x0, 1.0), xycoords=("data", "axes fraction"),
                         fontsize=7, xytext=(2, -10), textcoords="offset points")
    axes[-1].set_xlabel("seconds (levels end to end; server samples on the client's clock)")
    return _finish(fig)


def _load_text(load: dict) -> str:
    if load.get("mode") == "concurrency":
        return f"c={load.get('concurrency')}"
    return f"{load.get('rate')}/s" if load.get("rate") is not None else str(load.get("mode"))


def ab_server_figure(phases: Sequence[tuple[str, dict]], simulated: bool) -> Figure | None:
    """KV-cache usage and waiting requests of every phase, overlaid."""
    curves = []
    for name, result in phases:
        placed = _end_to_end(sweep_levels(result))
        kv, waiting = (_series(placed, "server", column) for column in
                       ("kv_cache_usage_perc", "num_requests_waiting"))
        if kv[0] or waiting[0]:
            curves.append((name, kv, waiting))
    if len(curves) < 2:
        return None
    fig, axes = _stack("KV cache and queue, phases overlaid", simulated, 2)
    for i, (name, kv, waiting) in enumerate(curves):
        axes[0].plot(*kv, color=_color(i), label=_text(name))
        axes[1].plot(*waiting, color=_color(i), label=_text(name))
    axes[0].set_ylabel("KV cache % used")
    axes[1].set_ylabel("waiting requests")
    axes[1].set_xlabel("seconds (each phase's levels end to end)")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return _finish(fig)


def _threshold(slo: str) -> float | None:
    for op in ("<=", ">="):
        if op in slo:
            try:
                return float(slo.split(op)[1])
            except ValueError:
                return None
    return None


def knee_figure(name: str, result: dict, simulated: bool) -> Figure | None:
    """Goodput and each SLO's reading against load (a percentile SLO: the level's
    percentile; a per-request SLO: the share of requests meeting it, which must reach
    99 %), passing probes filled, the knee marked."""
    knee = knee_of(result)
    if not knee or not knee.get("probes"):
        return None
    mode = knee["mode"]
    probes = sorted(knee["probes"], key=lambda p: p["load"])
    fig, axes = _stack(f"{name}: SLO search", simulated, 1 + len(knee["slos"]))
    rows: list[tuple[Any, str, list]] = [
        (axes[0], "goodput req/s", [p["goodput_requests_per_s"] for p in probes])]
    for ax, slo in zip(axes[1:], knee["slos"]):
        per_request = ":p" not in slo  # its value is the share of requests meeting it
        rows.append((ax, slo + (" (pass rate)" if per_request else ""),
                     [(p.get("slo_values") or {}).get(slo) for p in probes]))
    xs = [p["load"] for p in probes]
    for ax, label, ys in rows:
        points = [(x, y, p["passed"]) for x, y, p in zip(xs, ys, probes) if y is not None]
        if points:
            ax.plot([x for x, _, _ in points], [y for _, y, _ in points], color=_color(0))
            for x, y, passed in points:
                ax.plot(x, y, marker="o", color=_color(2 if passed else 3),
                        fillstyle="full" if passed else "none")
        limit = 0.99 if label.endswith("(pass rate)") else _threshold(label)
        if limit is not None and label != "goodput req/s":
            ax.axhline(limit, color=_color(3), linestyle="--", linewidth=0.8, label="SLO")
        if knee.get("knee") is not None:
            ax.axvline(knee["knee"], color="black", linestyle=":", label="knee")
        ax.set_ylabel(_text(label), fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[-1].set_xlabel("concurrency" if mode == "concurrency" else "requests/s")
    return _finish(fig)


def render_timeline_figures(summary: dict, phases: Sequence[tuple[str, dict]]) -> dict:
    """The figures :mod:`.server_section` refers to, keyed as it names them."""
    simulated = summary["simulated"]
    figures: dict[str, Figure | None] = {"ab_server": ab_server_figure(phases, simulated)}
    for i, (name, result) in enumerate(phases):
        figures[f"timeline_{i}"] = timeline_figure(name, result, simulated)
        figures[f"knee_{i}"] = knee_figure(name, result, simulated)
    return {key: fig for key, fig in figures.items() if fig is not None}
