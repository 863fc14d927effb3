"""What a person sees while a run goes.

On a terminal: a live rich progress display on stderr (level, requests done / total or seconds
left, output tokens/s, errors, in flight, ETA), redrawn by the engine's progress ticker
(no refresh thread competing with the event loop). Elsewhere (CI logs, pipes): the target
header (:func:`run_header`, printed by the caller before the load starts) and one plain line
per level as it finishes. Both print the same per-level lines; :func:`make_progress` picks one.
"""

from __future__ import annotations

from typing import Any, Callable, TextIO

from .engine import LevelResult
from .load import Load, StopRule
from .results import Results


def run_header(result: Results) -> str:
    """``http://host:8000  model=m`` (SIMULATED when it is the built-in simulator), then
    how many processes generate the load and why."""
    title = result.target.get("url") or result.target.get("endpoint") or ""
    if result.simulated:
        title = f"built-in simulator (SIMULATED) {title}"
    header = f"{title}  model={result.target.get('model')}"
    choice = result.data.get("worker_choice")
    if choice:
        header += f"\nworkers: {choice['workers']} ({choice['reason']})"
    return header


def error_kinds(errors: dict[str, int]) -> str:
    """``http_500×3 timeout×1``, most frequent first; ``-`` when there were none."""
    ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    return " ".join(f"{kind}×{count}" for kind, count in ranked) or "-"


def level_line(index: int, total: int, level: LevelResult) -> str:
    """One line saying what a finished level measured."""
    c = level.metrics.counts
    ttft = level.metrics.summary()["ttft_ms"]["p50"]
    tok_s = c.output_tokens / level.duration_s if level.duration_s > 0 else 0.0
    parts = [f"{c.completed} ok", f"{c.failed} failed"]
    if c.failed:
        parts[-1] += f" ({error_kinds(dict(level.metrics.errors))})"
    if c.incomplete:
        parts.append(f"{c.incomplete} incomplete")
    if c.dropped:
        parts.append(f"{c.dropped} dropped")
    parts += [f"{tok_s:,.1f} out tok/s",
              "TTFT p50 " + ("-" if ttft is None else f"{ttft:,.1f} ms"),
              f"{level.duration_s:.1f} s"]
    stopped = " (stopped early)" if level.partial else ""
    return f"[{index}/{total}] {level.load.label}: " + ", ".join(parts) + stopped


class PlainProgress:
    """Off a terminal: the header, then one line per finished level (flushed at once)."""

    def __init__(self, n_levels: int, echo: Callable[[str], None],
                 level_lines: bool = True) -> None:
        self.n_levels = n_levels
        self.done = 0
        self.echo = echo
        self.level_lines = level_lines  # False (--quiet): only warnings

    def start(self) -> None:
        pass

    def update(self, load: Load, snap: dict) -> None:
        pass

    def level_done(self, level: LevelResult) -> None:
        self.done += 1
        if self.level_lines:
            self.echo(level_line(self.done, self.n_levels, level))
        if level.client.warning:
            self.echo(f"warning: {level.load.label}: {level.client.warning}")
        elif level.client.note and self.level_lines:  # below the threshold: for the curious
            self.echo(f"  note: {level.client.note}")

    def close(self) -> None:
        pass


class LiveProgress(PlainProgress):
    """On a terminal: a rich progress bar for the running level, above it the finished ones."""

    def __init__(self, n_levels: int, stop: StopRule, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.console = Console(file=stream, highlight=False)
        super().__init__(n_levels, self.console.print)
        self.stop = stop
        # Requests when they end the level, else seconds; "whichever first" shows requests.
        self.unit = "requests" if stop.requests or stop.duration_s is None else "s"
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=16),
            TextColumn("{task.completed:.0f}/{task.total:.0f} " + self.unit),
            TextColumn("{task.fields[tok_s]:,.0f} tok/s  errors {task.fields[errors]}  "
                       "in flight {task.fields[in_flight]}  ETA"), TimeRemainingColumn(),
            console=self.console, auto_refresh=False, transient=True)
        self.task: Any = None

    def start(self) -> None:
        self.bar.start()

    def update(self, load: Load, snap: dict) -> None:
        if self.task is None:
            total = self.stop.requests_for(load) or self.stop.duration_s
            self.task = self.bar.add_task(f"[{self.done + 1}/{self.n_levels}] {load.label}",
                                          total=total, tok_s=0.0, errors=0, in_flight=0)
        elapsed = snap["elapsed_s"]
        finished = snap["completed"] + snap["failed"] + snap["incomplete"] + snap["dropped"]
        self.bar.update(self.task, completed=finished if self.unit == "requests" else elapsed,
                        tok_s=snap["output_tokens"] / elapsed if elapsed > 0 else 0.0,
                        errors=snap["failed"], in_flight=snap["in_flight"])
        self.bar.refresh()

    def level_done(self, level: LevelResult) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None
            self.bar.refresh()  # before printing: a print redraws the last rendered bar
        super().level_done(level)

    def close(self) -> None:
        self.bar.stop()


def make_progress(n_levels: int, stop: StopRule, stream: TextIO,
                  echo: Callable[[str], None]) -> PlainProgress:
    """Live display when ``stream`` is a terminal, plain lines otherwise."""
    if stream.isatty():
        return LiveProgress(n_levels, stop, stream)
    return PlainProgress(n_levels, echo)
