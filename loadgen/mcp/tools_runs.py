"""Run tools: ``start_run``, ``run_status``, ``cancel_run``, ``get_results``, ``list_runs``.

A run goes on in the background; ``start_run`` answers at once with its id. While it
runs, ``run_status`` tells how far it is (and, given ``wait_s``, waits for the end while
sending progress notifications to a client that asked for them).
"""

from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..errors import ConfigError
from ..report.files import read_json
from ..report.table import format_table
from .loadrun import LoadRequest, in_run_directory, measure, with_cloudwatch_endpoint
from .runs import (
    CANCELLED,
    COMPLETE,
    ENDED,
    LOAD,
    RESULTS_FILE,
    RUNNING,
    SCENARIO,
    LoadProgress,
    Run,
    RunManager,
)
from .start_args import with_run_arguments
from .toolkit import QUICK_S, READ_ONLY, bounded

MAX_WAIT_S = 300.0  # run_status's longest wait
CANCEL_WAIT_S = 60.0  # cancel_run waits this long for the run to write what it measured
_PROGRESS_EVERY_S = 1.0


class Percentiles(BaseModel):
    p50: float | None = Field(description="median so far, ms")
    p99: float | None = Field(description="99th percentile so far, ms")
    count: int = Field(description="values recorded so far")


class RunStatus(BaseModel):
    run_id: str
    kind: str = Field(description="load (start_run) or scenario (run_scenario)")
    state: str = Field(description="running, complete, cancelled (cancel_run), stopped (the "
                       "server's --max-duration), failed, or abandoned (its server went away)")
    elapsed_s: float
    target: str | None = Field(description="what the load goes to (a scenario run: its file)")
    levels_done: int = 0
    levels_total: int = 0
    level: str | None = Field(None, description="the load level being measured now")
    completed: int = 0
    failed: int = 0
    incomplete: int = 0
    dropped: int = 0
    output_tokens: int = 0
    in_flight: int = 0
    ttft_ms: Percentiles | None = Field(None, description="the running level's TTFT so far")
    itl_ms: Percentiles | None = Field(None, description="the running level's ITL so far")
    partial: bool = Field(False, description="ended early: the results hold what was measured")
    results: str | None = Field(None, description="resource URI of the results")
    error: str | None = None
    notes: list[str] = Field(default_factory=list, description="what the server's limits changed")
    log_tail: list[str] = Field(default_factory=list, description="scenario runs: last log lines")


class StartedRun(BaseModel):
    run_id: str
    state: str
    results: str = Field(description="resource URI of the results (complete when the run ends)")
    directory: str = Field(description="where the run's files are written")
    notes: list[str] = Field(description="what the server's limits changed in the request")
    request: dict[str, Any] = Field(description="the load as it will run")


class RunResults(BaseModel):
    run_id: str
    kind: str
    state: str
    partial: bool = Field(description="true when the run ended early (cancelled, stopped, failed)")
    simulated: bool = Field(description="measured against loadgen's built-in simulator")
    target: dict[str, Any] = Field(default_factory=dict)
    table: str = Field("", description="the table `loadgen run` prints (latencies in ms)")
    levels: list[dict[str, Any]] = Field(default_factory=list, description="one entry per "
                                         "load level, as in the results file")
    summary: dict[str, Any] | None = Field(None, description="scenario runs: the report summary")
    profile: dict[str, Any] | None = Field(None, description="profile slo-search: the knee, "
                                           "the bracket and every probe's verdict")
    files: list[str] = Field(default_factory=list, description="files the run wrote")


class RunListing(BaseModel):
    run_id: str
    kind: str
    state: str
    target: str | None
    started_at: str | None
    finished_at: str | None
    elapsed_s: float | None
    error: str | None = None


class RunList(BaseModel):
    workdir: str
    runs: list[RunListing] = Field(description="newest first")


def results_uri(run_id: str) -> str:
    return f"loadgen://runs/{run_id}/results"


def run_target(record: dict) -> str | None:
    request = record.get("request") or {}
    return request.get("target") or request.get("file")


def _status(manager: RunManager, run_id: str) -> RunStatus:
    """A run's status: live while this server runs it, else from its files."""
    record = manager.record(run_id)
    status = RunStatus(run_id=run_id, kind=record["kind"], state=record["state"],
                       elapsed_s=record.get("elapsed_s") or 0.0, target=run_target(record),
                       error=record.get("error"), notes=record.get("notes") or [],
                       results=results_uri(run_id),
                       partial=record["state"] not in (RUNNING, COMPLETE))
    run = manager.runs.get(run_id)
    if run is not None and run.kind == SCENARIO:
        status.log_tail = list(run.log)[-10:]
    if record["kind"] != LOAD:
        return status
    if run is not None and run.state == RUNNING:
        return status.model_copy(update=_live_counts(run.progress))
    return status.model_copy(update=_counts_from_file(manager, run_id, record))


def _live_counts(progress: LoadProgress) -> dict:
    stats = progress.statistics()
    stats.pop("level_elapsed_s")
    live = stats.pop("live")
    return {**stats, **{name: Percentiles(**values) for name, values in live.items()}}


def _counts_from_file(manager: RunManager, run_id: str, record: dict) -> dict:
    """An ended load run's counts, from its results file (absent if it never measured)."""
    path = manager.directory_of(run_id) / RESULTS_FILE
    levels = (read_json(manager.run_file(run_id, RESULTS_FILE)).get("levels", [])
              if path.exists() else [])
    counts = {"levels_done": len(levels),
              "levels_total": record.get("levels_total") or len(levels)}
    for key in ("completed", "failed", "incomplete", "dropped"):
        counts[key] = sum(level["requests"][key] for level in levels)
    counts["output_tokens"] = sum(level["output_tokens"] for level in levels)
    return counts


def _progress_message(status: RunStatus) -> str:
    if status.kind != LOAD:
        return status.log_tail[-1] if status.log_tail else status.state
    text = (f"{status.level or 'starting a level'} (level {status.levels_done + 1}/"
            f"{status.levels_total}): {status.completed} done, {status.failed} failed")
    for name, stats in (("TTFT", status.ttft_ms), ("ITL", status.itl_ms)):
        if stats is not None and stats.p50 is not None:
            text += f", {name} p50 {stats.p50:.1f} ms"
    return text


async def _wait_with_progress(manager: RunManager, run: Run, wait_s: float, ctx: Context) -> None:
    """Wait for the run to end (at most ``wait_s``), reporting progress every second."""
    request = run.request
    per_level = request.get("requests")
    total = per_level * run.progress.levels_total if run.progress and per_level else None
    remaining = wait_s
    while remaining > 0 and run.state == RUNNING:
        status = _status(manager, run.run_id)
        done = status.completed + status.failed + status.incomplete
        await ctx.report_progress(done if run.kind == LOAD else status.elapsed_s, total,
                                  _progress_message(status))
        step = min(_PROGRESS_EVERY_S, remaining)
        if await manager.wait(run, step):
            break
        remaining -= step


def _level_view(level: dict, histograms: bool) -> dict:
    if histograms:
        return level
    return {k: v for k, v in level.items() if k not in ("histograms", "histogram_units")}


def register(server: MCPServer, manager: RunManager) -> None:
    """Add the run tools to ``server``."""

    @server.tool()
    @bounded(QUICK_S)
    @with_run_arguments()
    async def start_run(**arguments: Any) -> StartedRun:
        """Start measuring load levels against a target, in the background; returns a run_id
        at once. Follow it with run_status, stop it with cancel_run, read it with get_results.
        Takes every option `loadgen sweep` takes (same names as the API's keywords, same
        defaults); each level is measured separately, exactly as `loadgen sweep` does."""
        request, notes, config = LoadRequest(arguments).checked(manager.options)

        async def body(run: Run) -> None:
            here = with_cloudwatch_endpoint(in_run_directory(config, run.directory),
                                            manager.options.aws_endpoint_url)
            await measure(here, run.directory / RESULTS_FILE, run.control,
                          run.progress.on_progress, run.progress.on_level)

        levels = request.levels_total(config)
        run = manager.start(LOAD, request.to_dict(), body, notes, levels_total=levels)
        return StartedRun(run_id=run.run_id, state=run.state, results=results_uri(run.run_id),
                          directory=str(run.directory), notes=notes, request=run.request)

    @server.tool(annotations=READ_ONLY)
    @bounded(lambda kwargs: min(kwargs.get("wait_s") or 0.0, MAX_WAIT_S) + QUICK_S)
    async def run_status(
        run_id: Annotated[str, Field(description="The id start_run or run_scenario returned.")],
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S, description="Wait up to this long "
                          "for the run to end, sending progress notifications meanwhile when "
                          "the client asks for them (0: answer at once).")] = 0.0,
    ) -> RunStatus:
        """State of a run: elapsed time, requests completed/failed so far, live TTFT/ITL
        percentiles of the level being measured."""
        run = manager.runs.get(run_id)
        if run is not None and wait_s > 0:
            await _wait_with_progress(manager, run, wait_s, ctx)
        return _status(manager, run_id)

    @server.tool()
    @bounded(CANCEL_WAIT_S + QUICK_S)
    async def cancel_run(
        run_id: Annotated[str, Field(description="The run to stop.")],
    ) -> RunStatus:
        """Stop a run: no new requests start, requests in flight are cut off and counted as
        incomplete, and everything measured so far is kept (partial results). A scenario
        run tears down what it deployed first."""
        run = manager.runs.get(run_id)
        if run is None:
            state = manager.record(run_id)["state"]  # raises for an unknown run
            raise ConfigError(f"run {run_id} is not running ({state}); nothing to cancel")
        if run.state in ENDED:
            raise ConfigError(f"run {run_id} has already ended ({run.state}); nothing to cancel")
        run.stop(CANCELLED)
        await manager.wait(run, CANCEL_WAIT_S)
        return _status(manager, run_id)

    @server.tool(annotations=READ_ONLY)
    @bounded(QUICK_S)
    async def get_results(
        run_id: Annotated[str, Field(description="A run id (list_runs shows them).")],
        histograms: Annotated[bool, Field(description="Also return each level's encoded HDR "
                              "histograms (large).")] = False,
    ) -> RunResults:
        """The results of a run: per level the numbers `loadgen run` prints in its table
        (throughput, TTFT/ITL/TPOT/E2E percentiles, failures by type), and the table itself.
        For a run still going: what its finished levels measured."""
        record = manager.record(run_id)
        directory = manager.directory_of(run_id)
        files = sorted(p.name for p in directory.iterdir() if p.is_file())
        out = RunResults(run_id=run_id, kind=record["kind"], state=record["state"],
                         partial=record["state"] != COMPLETE, simulated=False, files=files)
        if record["kind"] == LOAD:
            if RESULTS_FILE not in files:
                return out  # nothing measured yet
            data = read_json(manager.run_file(run_id, RESULTS_FILE))
            levels = data.get("levels", [])
            return out.model_copy(update={
                "partial": out.partial or bool(data.get("partial")),
                "simulated": bool(data.get("simulated")), "target": data.get("target") or {},
                "table": format_table(levels), "profile": data.get("profile"),
                "levels": [_level_view(level, histograms) for level in levels]})
        summary = (read_json(manager.run_file(run_id, "summary.json"))
                   if "summary.json" in files else None)
        simulated = bool(((summary or {}).get("run") or {}).get("simulated"))
        return out.model_copy(update={"summary": summary, "simulated": simulated})

    @server.tool(annotations=READ_ONLY)
    @bounded(QUICK_S)
    async def list_runs() -> RunList:
        """Every run in this server's work directory (also those of earlier sessions),
        newest first."""
        listings = [RunListing(run_id=r["run_id"], kind=r["kind"], state=r["state"],
                               target=run_target(r), started_at=r.get("started_at"),
                               finished_at=r.get("finished_at"), elapsed_s=r.get("elapsed_s"),
                               error=r.get("error"))
                    for r in manager.list_records()]
        return RunList(workdir=str(manager.options.workdir), runs=listings)
