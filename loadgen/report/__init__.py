"""Reports of a study: summary dict, Markdown, self-contained HTML, CSV, plots.

Entry points for a runner: :func:`write_reports` (phase results in memory) and
:func:`report_directory` (``loadgen report DIR``); :func:`build_summary` for the
numbers alone.
"""

from .files import (
                    REPORT_FORMATS,
                    SUMMARY_FILE,
                    ReportOutput,
                    load_results_dir,
                    parse_formats,
                    read_results,
                    report_directory,
                    write_reports,
)
from .summary import build_summary, ordered_phases

__all__ = ["REPORT_FORMATS", "SUMMARY_FILE", "ReportOutput", "build_summary", "load_results_dir",
           "ordered_phases", "parse_formats", "read_results", "report_directory",
           "write_reports"]
