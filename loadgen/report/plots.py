"""Report plots drawn with matplotlib's Agg canvas, as PNG (embedded in report.html) and
SVG/PNG files (``plots/`` beside the report, to attach to a pull request).

Figures are built with the object API (``Figure`` + ``FigureCanvasAgg``), never
``pyplot``: no global state, no GUI backend, safe to call from any thread.
"""

from __future__ import annotations

import io
import math
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter

from ..metrics import UNIT_SCALE, decode_histogram
from .compare import level_label, sweep_levels

LATENCY_PLOTS = (("ttft_ms", "Time to first token"), ("itl_ms", "Inter-token latency"),
                 ("e2e_ms", "End-to-end latency"))
_LINESTYLES = ("-", "--", ":", "-.")
_CURVE_POINTS = 60


def _text(text: str) -> str:
    """Literal text for matplotlib: a "$" would otherwise start mathtext."""
    return str(text).replace("$", r"\$")


def _figure(title: str, simulated: bool) -> tuple[Figure, object]:
    fig, axes = _panels(title, simulated, 1)
    return fig, axes[0]


def _panels(title: str, simulated: bool, n: int) -> tuple[Figure, list]:
    """A figure of ``n`` small multiples (up to 3 a row, shared y axis), 900 px wide."""
    columns = min(n, 3)
    rows = math.ceil(n / columns)
    fig = Figure(figsize=(9, 4.8 if rows == 1 else 3.4 * rows), dpi=100)
    FigureCanvasAgg(fig)
    grid = fig.subplots(rows, columns, sharey=True, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[:n]:
        ax.grid(True, alpha=0.3)
    fig.suptitle(_text(f"{title} — SIMULATED" if simulated else title))
    if simulated:
        fig.text(0.01, 0.99, "SIMULATED DATA", color="red", ha="left", va="top",
                 fontsize=9, fontweight="bold")
    return fig, axes[:n]


def _finish(fig: Figure) -> Figure:
    """Lay the figure out; :func:`encode` turns it into PNG or SVG bytes."""
    fig.tight_layout()
    return fig


def encode(fig: Figure, fmt: str) -> bytes:
    buffer = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else {"Creator": None, "Date": None}
    fig.savefig(buffer, format=fmt, metadata=metadata)
    return buffer.getvalue()


def _color(index: int) -> str:
    return f"C{index % 10}"


# --------------------------------------------------------------------------- per level


def throughput_plot(summary: dict) -> Figure | None:
    """Output tokens/s against load (concurrency or arrival rate), one line per phase."""
    fig, ax = _figure("Throughput by load", summary["simulated"])
    drawn = False
    for i, phase in enumerate(summary["phases"]):
        for mode in ("concurrency", "rate"):
            points = sorted((lv["load"].get(mode), lv["output_tokens_per_s"])
                            for lv in phase["levels"] if lv["load"].get("mode") == mode
                            and lv["load"].get(mode) is not None
                            and lv["output_tokens_per_s"] is not None)
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", color=_color(i),
                        linestyle="-" if mode == "concurrency" else "--",
                        label=_text(f"{phase['name']} ({mode})"))
                drawn = True
    if not drawn:
        return None
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("concurrent requests (or requests/s for rate levels)")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.legend()
    return _finish(fig)


def _grouped_bars(ax, groups: list[str], series: list[tuple[str, list]], fmt) -> None:
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0 for v in values]
        bars = ax.bar(xs, heights, width, label=_text(name), color=_color(i))
        ax.bar_label(bars, labels=[_text(fmt(v)) if v is not None else "" for v in values],
                     fontsize=8, padding=2)
    ax.set_xticks(range(len(groups)), [_text(g) for g in groups])


def cost_plot(summary: dict) -> Figure | None:
    """$ per million output tokens at every level, a bar per phase."""
    phases = summary["phases"]
    groups = list(dict.fromkeys(lv["label"] for p in phases for lv in p["levels"]))
    series = [(p["name"], [next((lv["cost_per_million_output_tokens"] for lv in p["levels"]
                                 if lv["label"] == g), None) for g in groups]) for p in phases]
    if not any(v is not None for _, values in series for v in values):
        return None
    fig, ax = _figure("Cost per million output tokens", summary["simulated"])
    _grouped_bars(ax, groups, series, lambda v: f"${v:.2f}")
    price = summary["run"].get("price_per_hour")
    ax.set_ylabel(_text(f"$ per 1M output tokens (at ${price}/h)"))
    ax.legend()
    return _finish(fig)


def decode_plot(summary: dict) -> Figure | None:
    """Single-stream decode tokens/s per phase."""
    names, values = [], []
    for phase in summary["phases"]:
        single = phase["single_stream"] or {}
        value = (single.get("decode_tokens_per_s") or {}).get("mean")
        if value is not None:
            names.append(phase["name"])
            values.append(value)
    if not values:
        return None
    fig, ax = _figure("Single-stream decode speed", summary["simulated"])
    bars = ax.bar([_text(n) for n in names], values,
                  color=[_color(i) for i in range(len(values))])
    ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], padding=2)
    ax.set_ylabel("decode tokens/s per request (mean)")
    return _finish(fig)


# --------------------------------------------------------------------------- percentiles


def percentile_curve(encoded: str, metric: str) -> tuple[list[float], list[float]]:
    """Points of the classic HdrHistogram percentile plot: x = 1 / (1 − percentile)
    (so 90%, 99%, 99.9% are evenly spaced on a log axis), y = value in ``metric``'s
    reported unit."""
    hist, scale = decode_histogram(encoded), UNIT_SCALE[metric]
    count = hist.get_total_count()
    if not count:
        return [], []
    # Beyond 1/(1-p) = count every percentile is the maximum; stop there.
    top = min(max(count, 10), 1_000_000)
    xs = [10 ** (math.log10(top) * i / (_CURVE_POINTS - 1)) for i in range(_CURVE_POINTS)]
    percentiles = [100 * (1 - 1 / x) for x in xs]
    values = hist.get_percentile_to_value_dict(percentiles)
    return xs, [values[p] * scale for p in percentiles]


# The classic HDR percentile axis: x = 1 / (1 − p), ticks at these percentiles.
HDR_TICKS = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999)


def _percentile_label(x: float, _pos: object) -> str:
    nines = 100 * (1 - 1 / x)
    return f"{nines:.{max(0, round(math.log10(x)) - 2)}f}%"


def latency_plot(phases: Sequence[tuple[str, dict]], metric: str, title: str,
                 simulated: bool) -> Figure | None:
    """Percentile distribution of ``metric`` (µs histograms): one panel per phase (small
    multiples on a shared y axis), one line per level, on the HDR percentile axis."""
    curves = []
    for name, result in phases:
        lines = []
        for level in sweep_levels(result):
            encoded = (level.get("histograms") or {}).get(metric)
            xs, ys = percentile_curve(encoded, metric) if encoded else ([], [])
            if xs:
                lines.append((level_label(level), xs, ys))
        if lines:
            curves.append((name, lines))
    if not curves:
        return None
    fig, axes = _panels(f"{title}: percentile distribution", simulated, len(curves))
    top = max(xs[-1] for _, lines in curves for _, xs, _ in lines)
    ticks = [1 / (1 - p / 100) for p in HDR_TICKS if 1 / (1 - p / 100) <= max(top, 10) * 1.01]
    for ax, (name, lines) in zip(axes, curves):
        for j, (label, xs, ys) in enumerate(lines):
            ax.plot(xs, ys, color=_color(j), label=_text(label))
        ax.set_title(_text(name), fontsize=10)
        _percentile_axis(ax, ticks)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("milliseconds")  # not forced to 0: the spread is what matters
    return _finish(fig)


def _styles(summary: dict) -> dict[str, tuple[str, str, str]]:
    """Phase name -> (color, marker, line style): a color per checkpoint, so A₁ and A₂
    share one, and a marker and line style per repeat of it (A₁ "o" solid, A₂ "s" dashed)."""
    checkpoints: dict[str, int] = {}
    repeats: dict[str, int] = {}
    out = {}
    for phase in summary["phases"]:
        served = str(phase["checkpoint"] or phase["label"])
        color = _color(checkpoints.setdefault(served, len(checkpoints)))
        repeat = repeats[served] = repeats.get(served, -1) + 1
        out[phase["name"]] = (color, "osD^v"[repeat % 5], _LINESTYLES[repeat % 4])
    return out


def latency_throughput_plot(summary: dict) -> Figure | None:
    """Where the knee is, every checkpoint on the same axes: TTFT p50 against output
    tok/s, a line per phase (a color per checkpoint, A₁ and A₂ as separate markers), a
    point per level labelled with its load."""
    styles = _styles(summary)
    lines = []
    for phase in summary["phases"]:
        points = sorted((lv["output_tokens_per_s"], (lv.get("ttft_ms") or {}).get("p50"),
                         lv["label"]) for lv in phase["levels"]
                        if lv["output_tokens_per_s"] and (lv.get("ttft_ms") or {}).get("p50"))
        if points:
            lines.append((phase["name"], points))
    if not lines:
        return None
    fig, ax = _figure("TTFT p50 against throughput", summary["simulated"])
    for name, points in lines:
        color, marker, style = styles[name]
        ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker=marker,
                linestyle=style, color=color, label=_text(name))
        for x, y, label in points:
            ax.annotate(_text(label.replace("concurrency ", "c=")), (x, y), fontsize=7,
                        textcoords="offset points", xytext=(3, -10))
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("TTFT p50, milliseconds")
    ax.legend(fontsize=8)
    return _finish(fig)


def overlaid_cdf_plot(summary: dict, phases: Sequence[tuple[str, dict]], metric: str,
                      title: str) -> Figure | None:
    """``metric``'s percentile distribution of every phase on the same axes (HDR percentile
    axis), a panel per load level (the single stream first)."""
    styles = _styles(summary)
    panels: dict[str, list] = {}
    for name, result in phases:
        single = (result.get("measurements") or {}).get("single_stream")
        levels = ([("single stream", single)] if single else []) + [
            (level_label(level), level) for level in sweep_levels(result)]
        for label, level in levels:
            encoded = (level.get("histograms") or {}).get(metric)
            xs, ys = percentile_curve(encoded, metric) if encoded else ([], [])
            if xs and name in styles:
                panels.setdefault(label, []).append((name, xs, ys))
    if not panels:
        return None
    fig, axes = _panels(f"{title}: distributions overlaid", summary["simulated"], len(panels))
    top = max(xs[-1] for lines in panels.values() for _, xs, _ in lines)
    ticks = [1 / (1 - p / 100) for p in HDR_TICKS if 1 / (1 - p / 100) <= max(top, 10) * 1.01]
    for ax, (label, lines) in zip(axes, panels.items()):
        for name, xs, ys in lines:
            color, _, style = styles[name]
            ax.plot(xs, ys, color=color, linestyle=style, label=_text(name))
        ax.set_title(_text(label), fontsize=10)
        _percentile_axis(ax, ticks)
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("milliseconds")
    return _finish(fig)


def _percentile_axis(ax, ticks: list[float]) -> None:
    ax.set_xscale("log")
    ax.set_xlim(1, ticks[-1])
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(_percentile_label))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("percentile")


def render_figures(summary: dict, phases: Sequence[tuple[str, dict]]) -> dict[str, Figure]:
    """Every plot that has data, keyed as the report document's figures are.
    ``phases`` is ``(name, raw results)`` in study order (for the histograms)."""
    plots = {"throughput": throughput_plot(summary), "decode": decode_plot(summary),
             "cost": cost_plot(summary), "latency_throughput": latency_throughput_plot(summary)}
    for metric, title in LATENCY_PLOTS:
        plots[f"latency_{metric}"] = latency_plot(phases, metric, title, summary["simulated"])
    for metric, title in LATENCY_PLOTS[:2]:
        plots[f"cdf_{metric}"] = overlaid_cdf_plot(summary, phases, metric, title)
    from .timeline_plots import render_timeline_figures  # it builds on this module

    plots.update(render_timeline_figures(summary, phases))
    return {key: fig for key, fig in plots.items() if fig is not None}


def render_plots(summary: dict, phases: Sequence[tuple[str, dict]]) -> dict[str, bytes]:
    """Every plot that has data, as PNG bytes."""
    return {key: encode(fig, "png") for key, fig in render_figures(summary, phases).items()}
