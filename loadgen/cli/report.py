"""``loadgen report`` and ``loadgen compare`` (registered by :mod:`loadgen.cli`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..report.compare import compare_runs
from ..report.compare_text import format_comparison
from ..report.labels import pair_labels
from ..report.files import (
    REPORT_FORMATS,
    parse_formats,
    read_results,
    report_directory,
    report_file,
)
from .common import one_line_errors


@click.command("report")
@click.argument("source", metavar="FILE.json|DIRECTORY", type=click.Path(path_type=Path))
@click.option("--format", "formats", default=",".join(REPORT_FORMATS), show_default=True,
              help="Comma-separated: md (report.md), html (report.html), json (summary.json), "
                   "csv (report.csv, fidelity.csv).")
@click.option("--price-per-hour", type=float, metavar="USD/H",
              show_default="the earlier summary.json's",
              help="Instance price in USD per hour, for $ per 1M output tokens.")
@click.option("--drift-tolerance", type=float, metavar="FRACTION",
              show_default="the earlier summary.json's, else 0.05",
              help="A-B-A drift tolerance, a fraction (0.05: 5%).")
@click.option("--labels", metavar="A,B,...", help="Names for the runs, one per results file "
              "in study order (default: phase labels, else model names; a repeat gets #1, #2).")
@one_line_errors
def report(source: Path, formats: str, price_per_hour: float | None,
           drift_tolerance: float | None, labels: str | None) -> None:
    """Build reports from a run/sweep results file (into FILE-report/) or from the phase
    results files of a scenario DIRECTORY (into DIRECTORY)."""
    if source.is_file():
        _, output = report_file(source, formats=parse_formats(formats),
                                price_per_hour=price_per_hour, drift_tolerance=drift_tolerance,
                                labels=labels)
    else:
        output = report_directory(source, formats=parse_formats(formats),
                                  price_per_hour=price_per_hour, drift_tolerance=drift_tolerance,
                                  labels=labels)
    if output.summary["simulated"]:
        click.echo("SIMULATED: these results come from the built-in simulator.", err=True)
    for paths in output.files.values():
        for path in paths:
            click.echo(str(path))


@click.command("compare")
@click.argument("file_a", type=click.Path(path_type=Path))
@click.argument("file_b", type=click.Path(path_type=Path))
@click.option("--labels", metavar="A,B", help="Names for the two runs (default: their phase "
                                              "labels, else model or file names).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@one_line_errors
def compare(file_a: Path, file_b: Path, labels: str | None, as_json: bool) -> None:
    """Compare run B (FILE_B) with run A (FILE_A): fidelity answers and B/A ratios."""
    results = [read_results(file_a), read_results(file_b)]
    names = pair_labels(labels, results, [file_a.stem, file_b.stem])
    result = compare_runs(*results, labels=names)
    if as_json:
        click.echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        click.echo(format_comparison(result), nl=False)
