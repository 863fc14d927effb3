"""The report's content as a renderer-neutral document built from a summary.

Markdown and HTML render the same sections, so both say the same thing. A
section is a title and a list of blocks: :class:`Paragraph`, :class:`Bullets`,
:class:`Table` and :class:`Figure` (a plot, by key; Markdown leaves figures to
the HTML page). Cells and texts are plain strings: each renderer escapes them.

Reading order: a SIMULATED banner (once, at the top, when any phase was simulated), the
answer (loadgen.report.headline), the overlaid plots, one table per load level with a
column per phase, the workload, then the details (loadgen.report.sections).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..metrics import FEW_SAMPLES_MARK, few_samples

SIMULATED_WARNING = ("SIMULATED: these numbers come from loadgen's built-in simulator, "
                     "not from a real model or GPU. Use them to see the flow, not to decide.")


@dataclass(frozen=True)
class Paragraph:
    text: str
    warning: bool = False
    headline: bool = False  # the report's answer sentence


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
    """``$0.29``; below 10 cents, 4 decimals (a simulator's time-scaled $0.0149)."""
    if value is None:
        return "–"
    return f"${value:,.2f}" if abs(value) >= 0.1 else f"${value:.4f}"


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


def plain(value: Any) -> str:
    """Metadata as given (a price of 1.1267 must not be rounded to 1.13)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def stat(level: dict, metric: str, key: str) -> Any:
    return (level.get(metric) or {}).get(key)


def percentile(level: dict, metric: str, key: str) -> str:
    """A percentile cell; a p99 from too few samples is marked (loadgen.metrics.few_samples)."""
    text = num(stat(level, metric, key), 1)
    return text + FEW_SAMPLES_MARK if few_samples(level.get(metric), key) else text


# --------------------------------------------------------------------------- reading order


def build_document(summary: dict) -> tuple[str, list[Section]]:
    """The report title and its sections, in reading order."""
    from . import headline, sections
    from .cloudwatch import cloudwatch_section  # they build on this module's blocks
    from .server_section import knee_section, server_section

    run = summary["run"]
    served = list(dict.fromkeys(str(p["checkpoint"]) for p in summary["phases"]
                                if p["checkpoint"]))
    name = run.get("scenario") or run.get("name") or " vs ".join(served) or "benchmark"
    parts = [headline.answer(summary), sections.overlaid_plots(summary),
             *sections.level_tables(summary), sections.turns(summary), sections.workload(summary),
             sections.phases(summary), sections.goodput(summary), sections.fidelity(summary),
             sections.drift(summary), sections.deployment(summary),
             cloudwatch_section(summary), server_section(summary), knee_section(summary),
             sections.client(summary),
             sections.per_phase_plots(summary), sections.metadata(summary)]
    return f"loadgen report: {name}", [s for s in parts if s.blocks]


def simulated_banner(summary: dict) -> str | None:
    """The one SIMULATED notice of a report (with the runner's note, e.g. a time scale)."""
    if not summary["simulated"]:
        return None
    note = str(summary["run"].get("simulation_note") or "")
    if note.startswith("SIMULATED"):  # its first sentence says what the banner already does
        note = note.partition(". ")[2]
    return f"{SIMULATED_WARNING} {note}".strip()


def what_was_measured(summary: dict) -> str:
    """Names first: which model/checkpoint each phase served, where, on what, at what price."""
    phases = "; ".join(f"{p['name']}: {num(p['checkpoint'])} at {target_name(p['target'])}"
                       for p in summary["phases"])
    instances = list(dict.fromkeys(filter(None, (instance_type(summary, p)
                                                 for p in summary["phases"]))))
    where = f" Instance: {', '.join(instances)}." if instances else ""
    price = summary["run"].get("price_per_hour")
    cost = f" Price: ${price}/h." if price else ""
    return f"Measured: {phases}.{where}{cost}"


def instance_type(summary: dict, phase: dict) -> str | None:
    """The instance a phase ran on: its deployment's, else the run's (scenario hardware)."""
    return phase["deployment"].get("instance_type") or summary["run"].get("instance_type")


def is_study(summary: dict) -> bool:
    """A comparison study (baseline and candidate, maybe a repeat), not a single run: only
    then do comparison and A-B-A drift sections apply."""
    return summary["roles"]["candidate"] is not None or summary["roles"]["baseline_repeat"] is not None


def target_name(target: dict) -> str:
    """What was measured: the kind of target and its SageMaker endpoint or URL."""
    parts = (target.get("kind"), target.get("endpoint") or target.get("url"))
    return " ".join(str(part) for part in parts if part) or "–"
