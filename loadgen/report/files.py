"""Reading a study directory and writing its report files.

A study directory holds one results file per phase (``*.json`` with ``levels``,
``measurements`` or ``fidelity``), possibly a ``summary.json`` from an earlier
report (its ``run`` metadata -- scenario name and hash, price -- is reused), and
other JSON such as deployment records, which are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..atomic import write_atomic
from ..errors import ConfigError
from ..results import is_results, read_json_object, read_results_file
from .compare import DEFAULT_DRIFT_TOLERANCE
from .csv_export import fidelity_csv, levels_csv
from .html import render_html
from .markdown import render_markdown
from .summary import build_summary, ordered_phases

SUMMARY_FILE = "summary.json"
PLOTS_DIR = "plots"  # beside report.html: every plot as PNG and SVG
REPORT_FORMATS = ("md", "html", "json", "csv")


@dataclass(frozen=True)
class ReportOutput:
    summary: dict  # what summary.json holds (also when "json" was not asked for)
    files: dict[str, list[Path]]  # format -> files written


def parse_formats(text: str) -> tuple[str, ...]:
    """``"md,html"`` → ``("md", "html")``; unknown names are a one-line error."""
    formats = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in formats if f not in REPORT_FORMATS]
    if unknown or not formats:
        raise ConfigError(f"unknown report format {', '.join(unknown) or repr(text)}: "
                          f"choose from {','.join(REPORT_FORMATS)}")
    return formats


read_json = read_json_object  # the results module's readers: one wording for every file
read_results = read_results_file


def load_results_dir(directory: Path) -> tuple[list[dict], list[str], dict | None]:
    """Phase results (with their file names) and the earlier summary, if any."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: no such file or directory; give a results file "
                          "(run/sweep --out) or a scenario's --out directory")
    results, names = [], []
    for path in sorted(directory.glob("*.json")):
        if path.name == SUMMARY_FILE:
            continue
        data = read_json(path)
        if is_results(data):
            results.append(data)
            names.append(path.name)
    summary_path = directory / SUMMARY_FILE
    previous = read_json(summary_path) if summary_path.exists() else None
    if not results:
        raise ConfigError(f"{directory}: no loadgen results files (*.json) found; run "
                          "`loadgen scenario run --out DIR` or `loadgen run --out FILE` first")
    return results, names, previous


def write_reports(directory: Path, phase_results: Sequence[dict], *,
                  formats: Sequence[str] = REPORT_FORMATS,
                  price_per_hour: float | None = None, run_info: dict | None = None,
                  drift_tolerance: float = DEFAULT_DRIFT_TOLERANCE,
                  files: Sequence[str] | None = None,
                  labels: str | Sequence[str] | None = None) -> ReportOutput:
    """Build the summary and write ``report.md``, ``report.html``, ``summary.json`` and
    ``report.csv`` (+ ``fidelity.csv``) into ``directory``, as ``formats`` asks."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    summary = build_summary(phase_results, price_per_hour=price_per_hour, run_info=run_info,
                            drift_tolerance=drift_tolerance, files=files, labels=labels)
    try:
        named = [(name, result) for name, result, _ in ordered_phases(phase_results, files,
                                                                          labels)]
        written: dict[str, list[Path]] = {}
        if "json" in formats:
            text = json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
            written["json"] = [write_atomic(directory / SUMMARY_FILE, text)]
        if "md" in formats:
            written["md"] = [write_atomic(directory / "report.md", render_markdown(summary))]
        if "html" in formats:
            written["html"] = _write_html(directory, summary, named)
        if "csv" in formats:
            written["csv"] = [write_atomic(directory / "report.csv", levels_csv(summary))]
            answers = fidelity_csv(summary, named)
            if answers is not None:
                written["csv"].append(write_atomic(directory / "fidelity.csv", answers))
    except OSError as exc:  # a full disk, or a report path that is a device: one line
        raise ConfigError(f"{directory}: cannot write the reports "
                          f"({exc.strerror or exc})") from None
    return ReportOutput(summary, written)


def _write_html(directory: Path, summary: dict, named: list[tuple[str, dict]]) -> list[Path]:
    """report.html (plots embedded) and each plot as plots/KEY.png and plots/KEY.svg."""
    from .plots import (  # matplotlib is slow to import: only when drawing
        encode,
        render_figures,
    )

    figures = render_figures(summary, named)
    pngs = {key: encode(figure, "png") for key, figure in figures.items()}
    paths = [write_atomic(directory / "report.html", render_html(summary, pngs))]
    for key, figure in figures.items():
        paths.append(write_atomic(directory / PLOTS_DIR / f"{key}.png", pngs[key]))
        paths.append(write_atomic(directory / PLOTS_DIR / f"{key}.svg", encode(figure, "svg")))
    return paths


def report_directory(directory: Path, *, formats: Sequence[str] = REPORT_FORMATS,
                     price_per_hour: float | None = None,
                     drift_tolerance: float | None = None,
                     labels: str | Sequence[str] | None = None) -> ReportOutput:
    """``loadgen report DIR``: rebuild every report from the phase files in ``DIR``.
    Options given here override what an earlier ``summary.json`` recorded."""
    results, names, previous = load_results_dir(directory)
    # Times, versions and the like are recomputed from the phase files by build_summary.
    run_info = dict((previous or {}).get("run") or {})
    for result in results:  # a runner may also stamp scenario metadata on each phase file
        for key, value in (result.get("scenario") or {}).items():
            run_info.setdefault(key, value)
    if price_per_hour is not None:
        run_info["price_per_hour"] = price_per_hour
    if drift_tolerance is None:
        drift_tolerance = ((previous or {}).get("drift") or {}).get(
            "tolerance", DEFAULT_DRIFT_TOLERANCE)
    return write_reports(directory, results, formats=formats,
                         price_per_hour=run_info.get("price_per_hour"), run_info=run_info,
                         drift_tolerance=drift_tolerance, files=names, labels=labels)


def report_file(path: Path, *, formats: Sequence[str] = REPORT_FORMATS,
                price_per_hour: float | None = None,
                drift_tolerance: float | None = None,
                labels: str | Sequence[str] | None = None) -> tuple[Path, ReportOutput]:
    """``loadgen report FILE.json``: reports on one ``run``/``sweep`` results file, written
    to ``FILE-report/`` beside it (so several runs in one directory keep their reports)."""
    path = Path(path)
    result = read_results(path)
    directory = path.with_name(f"{path.stem}-report")
    output = write_reports(directory, [result], formats=formats, price_per_hour=price_per_hour,
                           drift_tolerance=drift_tolerance or DEFAULT_DRIFT_TOLERANCE,
                           files=[path.name], labels=labels)
    return directory, output
