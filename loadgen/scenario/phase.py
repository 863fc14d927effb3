"""One phase's results file, and the measurements that fill it.

The file (``DIR/phase-<label>.json``) is the results-file dict of ``loadgen sweep``
(``levels`` = the concurrency sweep) plus::

    phase:        {label, checkpoint, model, order_index, status, error, notes}
    scenario:     run metadata (name, file hash, hardware, price, simulated, ...)
    measurements: {single_stream: level dict,
                   fixed_length: {tokens, repeats, e2e_s: [...], min_s, max_s},
                   sweep: [level dicts],
                   knee: [level dicts of the SLO search's probes],
                   knee_search: the search (loadgen.knee: knee, bracket, probes)}
    fidelity:     the fidelity suite's answers and score
    server:       deployment facts (time to InService, weights, KV cache, ...)

Every measurement of a phase runs through the engine (:func:`loadgen.api.run_on`) on one
target opened for the phase: one preflight (a real request on SageMaker) and one read of
the server's /metrics facts, however many measurements and levels there are.

It is rewritten (atomically) after every measurement, so an interruption or a
failure later in the phase keeps what was measured. ``phase.status`` is
``running`` until the phase ends ``complete``, ``failed`` or ``interrupted``;
``--resume`` skips phases whose file says ``complete``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from ..api import OpenedTarget, make_target, open_for_runs, run_on
from ..config import RequestOptions
from ..engine import LevelResult, RunControl
from ..errors import RunStopped
from ..fidelity import fidelity_options, run_fidelity
from ..knee import format_knee
from ..load import ArrivalRate, ConstantConcurrency, StopRule
from ..measurement import Measurement
from ..metrics import e2e_ns
from ..record import now_iso
from ..results import Results, level_to_dict, write_json
from ..runconfig import RunConfig, build_run
from ..slo import parse_slo
from ..status import COMPLETE, FAILED, INTERRUPTED, RUNNING  # noqa: F401 (runner reads them here)
from ..targets.base import Target, open_target, with_options
from ..workload.prompts import PromptSource, load_prompt_file
from .cloudwatch import phase_settings
from .schema import Phase, Scenario

Log = Callable[[str], None]


def phase_file(out_dir: Path, label: str) -> Path:
    return out_dir / f"phase-{label}.json"


def read_phase_file(path: Path) -> dict | None:
    """The phase file, or None when it is missing or unreadable (then it is re-run)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_complete(data: dict | None) -> bool:
    return bool(data) and (data.get("phase") or {}).get("status") == COMPLETE


class PhaseDoc:
    """The phase file being built: a results file (:class:`~loadgen.results.Results`:
    :attr:`target`, :attr:`server`, the sweep's :attr:`levels`) followed by the phase's own
    keys (:attr:`data`: phase, scenario, measurements, fidelity, simulation, deployment, ...);
    :meth:`save` writes it atomically."""

    def __init__(self, path: Path, phase: Phase, run_info: dict) -> None:
        self.path = path
        self.target: dict[str, Any] = {}
        self.levels: list[LevelResult] = []  # the sweep's
        self.server: dict[str, Any] = {}  # the results file's (deployment and /metrics facts)
        self.simulated = bool(run_info.get("simulated"))
        self.started_at = now_iso()
        self.finished_at: str | None = None
        self.partial = True
        self.data: dict[str, Any] = {}
        self.data.update({
            "phase": {"label": phase.label, "checkpoint": phase.checkpoint, "model": phase.model,
                      "order_index": phase.order_index, "status": RUNNING, "error": None,
                      "notes": phase.notes},
            "scenario": run_info,
            "measurements": {"single_stream": None, "fixed_length": None, "sweep": []},
            "fidelity": None,
        })

    def describe_workload(self, scenario: Scenario, texts: tuple[str, ...]) -> None:
        """The phase's ``workload``: what every phase of the study sends (paired)."""
        r, m = scenario.request, scenario.measurements
        self.data["workload"] = {
            "api": r.api, "input_tokens": r.input_tokens, "ignore_eos": r.ignore_eos,
            "temperature": r.temperature,
            "prompts": (f"{r.prompts} ({len(texts)} prompts, in order)" if r.prompts
                        else "synthetic"),
            "seed": r.seed, "paired": True,
            "single_stream": (dataclasses.asdict(m.single_stream)
                              if m.single_stream.enabled else None),
            "fixed_length": (dataclasses.asdict(m.fixed_length)
                             if m.fixed_length.enabled else None),
            "sweep": ({"concurrency": list(m.sweep.concurrency),
                       "requests": [m.sweep.requests_at(c) for c in m.sweep.concurrency],
                       "duration_s": m.sweep.duration, "output_tokens": m.sweep.output_tokens}
                      if m.sweep.enabled else None),
            "fidelity": ({"seed": m.fidelity.seed, "max_tokens": m.fidelity.max_tokens}
                         if m.fidelity.enabled else None)}

    @property
    def measurements(self) -> dict:
        return self.data["measurements"]

    def save(self) -> Path:
        data = Results.of_run(target=self.target, levels=self.levels, started_at=self.started_at,
                              finished_at=self.finished_at, partial=self.partial,
                              simulated=self.simulated, server=self.server,
                              extra=self.data).data
        data["measurements"] = {**data["measurements"], "sweep": data["levels"]}
        return write_json(self.path, data)

    def finish(self, status: str, error: str | None = None) -> Path:
        phase = self.data["phase"]
        phase["status"], phase["error"] = status, error
        self.finished_at = now_iso()
        self.partial = status != COMPLETE
        return self.save()


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where a phase's requests go."""

    url: str
    sagemaker: dict  # keyword options for SageMaker targets ({} for HTTP)
    fidelity_url: str | None = None  # the simulator's answering twin; None: same as url

    def options(self) -> dict:
        return {k: v for k, v in self.sagemaker.items() if v is not None}


def run_values(scenario: Scenario, phase: Phase, endpoint: Endpoint, **more: Any) -> dict:
    """The run options of one of the phase's runs: the ``request:`` section's, the phase's
    model and server, and the measurement's own (``more``)."""
    values = {**scenario.request.values, "target": endpoint.url, **endpoint.options(),
              **more}
    if phase.model is not None:
        values["model"] = phase.model
    return values


def request_options(scenario: Scenario, phase: Phase, endpoint: Endpoint) -> RequestOptions:
    return build_run(run_values(scenario, phase, endpoint), where="scenario key").options


class Measurer:
    """Runs the scenario's measurements for one phase into its :class:`PhaseDoc`, all on
    one opened target: one preflight and one read of the server's facts per phase."""

    def __init__(self, scenario: Scenario, phase: Phase, endpoint: Endpoint, doc: PhaseDoc,
                 control: RunControl, log: Log) -> None:
        self.scenario, self.phase, self.endpoint = scenario, phase, endpoint
        self.doc, self.control, self.log = doc, control, log
        self.options = request_options(scenario, phase, endpoint)
        base = Path(scenario.path).parent if scenario.path else Path(".")
        prompts = scenario.request.prompts
        self.texts = load_prompt_file(base / prompts) if prompts else ()
        doc.describe_workload(scenario, self.texts)

    def _config(self, concurrency: int, stop: StopRule, output_tokens: int,
                measurement: str, workers: int | str = 1) -> RunConfig:
        """One measurement's run: built from the same run options as every front door's.
        Paired prompts: every phase sends the same prompts in the same order for a
        measurement (synthetic ones salted by the study and the measurement, not the run),
        and no two measurements of a phase share them (a prefix cache must not carry over)."""
        config = build_run(run_values(self.scenario, self.phase, self.endpoint,
                                      concurrency=(concurrency,), output_tokens=output_tokens,
                                      workers=workers), where="scenario key")
        if self.texts:  # the legacy ``prompts:`` file, read relative to the scenario
            prompts = PromptSource(config.workload.input_tokens, output_tokens,
                                   texts=self.texts)
        else:
            prompts = config.workload.prompt_source()
            if getattr(prompts, "salt", False) is None:
                prompts = dataclasses.replace(prompts,
                                              salt=f"{self.scenario.name}/{measurement}/")
        # sagemaker:// levels: CloudWatch is read after the phase (loadgen.scenario.cloudwatch)
        return dataclasses.replace(config, stop=stop, prompts=prompts,
                                   cloudwatch=phase_settings(self.scenario, self.phase))

    def _connections(self) -> int:
        """Connections the phase needs at once: its highest concurrency."""
        sweep, knee = self.scenario.measurements.sweep, self.scenario.measurements.knee
        most = max((1, *sweep.concurrency)) if sweep.enabled else 1
        if knee.enabled and not knee.rate_search:  # the most streams the search may probe
            most = max(most, int(knee.start * 2 ** (knee.max_probes - 1)))
        return most

    async def _level(self, opened: OpenedTarget, concurrency: int, stop: StopRule,
                     output_tokens: int, measurement: str, keep_records: bool = False,
                     workers: int | str = 1) -> LevelResult | None:
        """One level on the phase's target (None: the run was stopped before it)."""
        config = self._config(concurrency, stop, output_tokens, measurement, workers)
        result = await run_on(opened, config, control=self.control, keep_records=keep_records,
                              log=self.log)
        return result.levels[0].measured if result.levels else None

    async def run_all(self) -> None:
        if self.control.stopped:
            return
        try:
            async with open_for_runs(self.endpoint.url, self.options,
                                     pool_size=self._connections(),
                                     sagemaker_options=self.endpoint.options(),
                                     control=self.control) as opened:
                self.doc.target = opened.target.describe()
                self.doc.simulated |= opened.simulated  # e.g. a loadgen mock-server
                self.doc.server.update(opened.server)
                await self._measure_all(opened)
        except RunStopped:
            return  # stopped during the preflight: nothing measured, the phase is interrupted

    async def _measure_all(self, opened: OpenedTarget) -> None:
        for step in (self.single_stream, self.fixed_length, self.sweep, self.knee,
                     self.fidelity):
            if self.control.stopped:
                return
            await step(opened)
            self.doc.target = opened.target.describe()
            self.doc.save()

    async def single_stream(self, opened: OpenedTarget) -> None:
        spec = self.scenario.measurements.single_stream
        if not spec.enabled:
            return
        result = await self._level(opened, 1, StopRule(requests=spec.requests,
                                                       warmup=spec.warmup), spec.output_tokens,
                                   "single-stream")
        level = level_to_dict(result) if result is not None else None
        self.doc.measurements["single_stream"] = level
        if level:
            decode = (level.get("decode_tokens_per_s") or {}).get("mean")
            self.log(f"single stream: decode {_num(decode)} tok/s (mean of "
                     f"{level['requests']['completed']} requests)")

    async def fixed_length(self, opened: OpenedTarget) -> None:
        spec = self.scenario.measurements.fixed_length
        if not spec.enabled:
            return
        result = await self._level(opened, 1, StopRule(requests=spec.repeats),
                                   spec.output_tokens, "fixed-length", keep_records=True)
        records = (result.records or []) if result is not None else []
        times = [round(e2e_ns(r) / 1e9, 4) for r in records if r.ok]
        failed = sum(not r.ok for r in records)
        self.doc.measurements["fixed_length"] = {
            "tokens": spec.output_tokens, "repeats": spec.repeats, "e2e_s": times,
            "min_s": min(times, default=None), "max_s": max(times, default=None),
            "failed": failed}
        if times:
            self.log(f"{spec.output_tokens}-token generations: {min(times):.2f}-{max(times):.2f} s "
                     f"({len(times)} runs)")

    async def sweep(self, opened: OpenedTarget) -> None:
        spec = self.scenario.measurements.sweep
        if not spec.enabled:
            return
        for concurrency in spec.concurrency:
            if self.control.stopped:
                return
            stop = StopRule(requests=spec.requests_at(concurrency), duration_s=spec.duration,
                            warmup=spec.warmup)
            result = await self._level(opened, concurrency, stop, spec.output_tokens,
                                       f"sweep-c{concurrency}", workers=spec.workers)
            if result is None:
                continue
            self.doc.levels.append(result)
            self.doc.save()
            level = level_to_dict(result)
            self.log(f"concurrency {concurrency}: {_num(level['output_tokens_per_s'])} output "
                     f"tok/s, {level['requests']['completed']} ok / "
                     f"{level['requests']['failed']} failed")

    async def knee(self, opened: OpenedTarget) -> None:
        """``measurements.knee``: the SLO search (:mod:`loadgen.knee`) on this phase; its
        probes go to ``measurements.knee``, the search to ``measurements.knee_search``."""
        spec = self.scenario.measurements.knee
        if not spec.enabled:
            return
        measurement = Measurement(slos=tuple(parse_slo(text) for text in spec.slo),
                                  profile="slo-search", rate_search=spec.rate_search,
                                  search_precision=spec.precision, max_probes=spec.max_probes)
        first = (ArrivalRate(spec.start) if spec.rate_search
                 else ConstantConcurrency(int(spec.start)))
        config = dataclasses.replace(
            self._config(1, StopRule(duration_s=spec.duration, warmup=spec.warmup),
                         spec.output_tokens, "knee"),
            loads=(first,), measurement=measurement)
        result = await run_on(opened, config, control=self.control, log=self.log)
        search = result.data.get("profile") or {}
        self.doc.measurements["knee"] = result.to_dict()["levels"]
        self.doc.measurements["knee_search"] = search
        if search:
            self.log(format_knee(search).splitlines()[0])

    async def fidelity(self, opened: OpenedTarget) -> None:
        spec = self.scenario.measurements.fidelity
        if not spec.enabled:
            return
        options = fidelity_options(self.options)
        async with self._fidelity_target(opened, options) as target:
            result = await run_fidelity(target, options, seed=spec.seed,
                                        max_tokens=spec.max_tokens)
        self.doc.data["fidelity"] = result.to_dict()
        self.log(f"fidelity: {result.score}/{result.total} correct"
                 + (f", {result.errors} failed requests" if result.errors else ""))

    @contextlib.asynccontextmanager
    async def _fidelity_target(self, opened: OpenedTarget,
                               options: RequestOptions) -> AsyncIterator[Target]:
        """The phase's target asking with the fidelity options; under ``--simulate`` the
        answering twin instead, a second server (its responder lives in this process)."""
        if self.endpoint.fidelity_url is None:
            yield with_options(opened.target, options)
            return
        twin = make_target(self.endpoint.fidelity_url, options, pool_size=1)
        async with open_target(twin) as answering:
            yield answering


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
