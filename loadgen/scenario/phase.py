"""One phase's results file, and the measurements that fill it.

The file (``DIR/phase-<label>.json``) is the results-file dict of ``loadgen sweep``
(``levels`` = the concurrency sweep) plus::

    phase:        {label, checkpoint, model, order_index, status, error, notes}
    scenario:     run metadata (name, file hash, hardware, price, simulated, ...)
    measurements: {single_stream: level dict,
                   fixed_length: {tokens, repeats, e2e_s: [...], min_s, max_s},
                   sweep: [level dicts]}
    fidelity:     the fidelity suite's answers and score
    server:       deployment facts (time to InService, weights, KV cache, ...)

It is rewritten (atomically) after every measurement, so an interruption or a
failure later in the phase keeps what was measured. ``phase.status`` is
``running`` until the phase ends ``complete``, ``failed`` or ``interrupted``;
``--resume`` skips phases whose file says ``complete``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from ..api import make_target, run_config
from ..config import RequestOptions, Timeouts
from ..engine import RunControl
from ..fidelity import fidelity_options, run_fidelity
from ..load import ConstantConcurrency, StopRule
from ..prompts import PromptSource, load_prompt_file
from ..record import now_iso
from ..results import write_json
from ..runconfig import RunConfig, TargetConfig
from ..targets.base import open_target
from .schema import Phase, Scenario

COMPLETE, FAILED, INTERRUPTED, RUNNING = "complete", "failed", "interrupted", "running"
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
    """The phase file being built; :meth:`save` writes it atomically."""

    def __init__(self, path: Path, phase: Phase, run_info: dict) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "loadgen_version": __version__, "target": {}, "started_at": now_iso(),
            "finished_at": None, "partial": True, "simulated": bool(run_info.get("simulated")),
            "server": {}, "levels": [],
            "phase": {"label": phase.label, "checkpoint": phase.checkpoint, "model": phase.model,
                      "order_index": phase.order_index, "status": RUNNING, "error": None,
                      "notes": phase.notes},
            "scenario": run_info,
            "measurements": {"single_stream": None, "fixed_length": None, "sweep": []},
            "fidelity": None,
        }

    @property
    def measurements(self) -> dict:
        return self.data["measurements"]

    def set_target(self, described: dict) -> None:
        if not self.data["target"]:
            self.data["target"] = described

    def save(self) -> Path:
        return write_json(self.path, self.data)

    def finish(self, status: str, error: str | None = None) -> Path:
        phase = self.data["phase"]
        phase["status"], phase["error"] = status, error
        self.data["finished_at"] = now_iso()
        self.data["partial"] = status != COMPLETE
        return self.save()


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where a phase's requests go."""

    url: str
    sagemaker: dict  # keyword options for SageMaker targets ({} for HTTP)
    fidelity_url: str | None = None  # the simulator's answering twin; None: same as url

    def options(self) -> dict:
        return {k: v for k, v in self.sagemaker.items() if v is not None}


def request_options(scenario: Scenario, phase: Phase) -> RequestOptions:
    r = scenario.request
    return RequestOptions(api=r.api, model=phase.model, stream=r.stream,
                          temperature=r.temperature, ignore_eos=r.ignore_eos,
                          continuous_usage=r.continuous_usage, api_key_env=r.api_key_env,
                          timeouts=Timeouts(r.connect_timeout, r.timeout, r.idle_timeout))


class Measurer:
    """Runs the scenario's measurements for one phase into its :class:`PhaseDoc`."""

    def __init__(self, scenario: Scenario, phase: Phase, endpoint: Endpoint, doc: PhaseDoc,
                 control: RunControl, log: Log) -> None:
        self.scenario, self.phase, self.endpoint = scenario, phase, endpoint
        self.doc, self.control, self.log = doc, control, log
        self.options = request_options(scenario, phase)
        base = Path(scenario.path).parent if scenario.path else Path(".")
        prompts = scenario.request.prompts
        self.texts = load_prompt_file(base / prompts) if prompts else ()

    def _prompts(self, output_tokens: int) -> PromptSource:
        return PromptSource(self.scenario.request.input_tokens, output_tokens,
                            texts=self.texts)

    def _config(self, concurrency: int, stop: StopRule, output_tokens: int,
                workers: int = 1) -> RunConfig:
        return RunConfig(loads=(ConstantConcurrency(concurrency),), stop=stop,
                         target=TargetConfig(self.endpoint.url, **self.endpoint.options()),
                         options=self.options, prompts=self._prompts(output_tokens),
                         workers=workers)

    async def _level(self, concurrency: int, stop: StopRule, output_tokens: int,
                     keep_records: bool = False, workers: int = 1):
        config = self._config(concurrency, stop, output_tokens, workers)
        result = await run_config(config, control=self.control, keep_records=keep_records,
                                  log=self.log)
        data = result.to_dict()
        self.doc.set_target(data["target"])
        return result, data["levels"][0] if data["levels"] else None

    async def run_all(self) -> None:
        steps = [self.single_stream, self.fixed_length, self.sweep, self.fidelity]
        for step in steps:
            if self.control.stopped:
                return
            await step()
            self.doc.save()

    async def single_stream(self) -> None:
        spec = self.scenario.measurements.single_stream
        if not spec.enabled:
            return
        _, level = await self._level(1, StopRule(requests=spec.requests, warmup=spec.warmup),
                                     spec.output_tokens)
        self.doc.measurements["single_stream"] = level
        if level:
            decode = (level.get("decode_tokens_per_s") or {}).get("mean")
            self.log(f"single stream: decode {_num(decode)} tok/s (mean of "
                     f"{level['requests']['completed']} requests)")

    async def fixed_length(self) -> None:
        spec = self.scenario.measurements.fixed_length
        if not spec.enabled:
            return
        result, _ = await self._level(1, StopRule(requests=spec.repeats), spec.output_tokens,
                                      keep_records=True)
        records = (result.levels[0].records or []) if result.levels else []
        # e2e as a user sees it: from sending the request to the last byte.
        times = [round((r.end_ns - r.intended_ns) / 1e9, 4) for r in records if r.ok]
        failed = sum(not r.ok for r in records)
        self.doc.measurements["fixed_length"] = {
            "tokens": spec.output_tokens, "repeats": spec.repeats, "e2e_s": times,
            "min_s": min(times, default=None), "max_s": max(times, default=None),
            "failed": failed}
        if times:
            self.log(f"{spec.output_tokens}-token generations: {min(times):.2f}-{max(times):.2f} s "
                     f"({len(times)} runs)")

    async def sweep(self) -> None:
        spec = self.scenario.measurements.sweep
        if not spec.enabled:
            return
        for concurrency in spec.concurrency:
            if self.control.stopped:
                return
            stop = StopRule(requests=spec.requests_at(concurrency), duration_s=spec.duration,
                            warmup=spec.warmup)
            _, level = await self._level(concurrency, stop, spec.output_tokens,
                                         workers=spec.workers)
            if level is None:
                continue
            self.doc.measurements["sweep"].append(level)
            self.doc.data["levels"] = self.doc.measurements["sweep"]
            self.doc.save()
            self.log(f"concurrency {concurrency}: {_num(level['output_tokens_per_s'])} output "
                     f"tok/s, {level['requests']['completed']} ok / "
                     f"{level['requests']['failed']} failed")

    async def fidelity(self) -> None:
        spec = self.scenario.measurements.fidelity
        if not spec.enabled:
            return
        options = fidelity_options(self.options)
        url = self.endpoint.fidelity_url or self.endpoint.url
        target = make_target(url, options, pool_size=1, **self.endpoint.options())
        async with open_target(target) as opened:
            result = await run_fidelity(opened, options, seed=spec.seed,
                                        max_tokens=spec.max_tokens)
        self.doc.data["fidelity"] = result.to_dict()
        self.log(f"fidelity: {result.score}/{result.total} correct"
                 + (f", {result.errors} failed requests" if result.errors else ""))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
