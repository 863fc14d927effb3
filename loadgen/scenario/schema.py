"""What a scenario file holds: the declared shape of every section, and the frozen
dataclasses the runner works with.

The shape (``SCENARIO`` below) is read by :mod:`loadgen.scenario.nodes`, which reports
every problem with its line; :func:`loadgen.scenario.build.build_scenario` then runs
the checks that span sections (unique labels, target xor deploy, a simulator profile
per checkpoint, ...) and only builds the dataclasses when nothing is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..cloudwatch_settings import EndpointMetricsConfig
from ..codecs.sagemaker_formats import PAYLOAD_FORMATS
from ..errors import ConfigError
from ..measurement import Measurement
from ..option import OptionField, default
from ..runconfig import RunConfig, TargetSpec, run_options
from ..simulator.profile import SimProfile
from ..servers.spec import DEFAULT_PORT, DEFAULT_READY_TIMEOUT_S, DEFAULT_STOP_GRACE_S
from .checks import (
    fraction,
    label_check,
    non_empty,
    non_negative,
    one_of,
    output_count,
    port_check,
    positive,
    price,
    publish_frequency,
    slo_check,
    url_check,
)
from .nodes import (
    Boolean,
    Check,
    Command,
    Integer,
    IntegerList,
    ListOf,
    MapOf,
    Number,
    Section,
    Text,
    TextList,
    TextMap,
    WorkerCount,
)

# --------------------------------------------------------------------------- the shape

HARDWARE = Section({
    "instance_type": Text(non_empty), "gpu": Text(), "region": Text(),
    "price_per_hour": Number(price), "currency": Text(non_empty),
}, required=("instance_type",))

# Run options a scenario sets elsewhere or not at all, and why (every other run option is a
# key of ``request:``, generated from its declaration: tests/test_run_description.py).
SCENARIO_ELSEWHERE = {
    "target": "each phase's target.url", "output_tokens": "each measurement's output_tokens",
    "workers": "measurements.sweep.workers", "concurrency": "measurements.sweep.concurrency",
    "requests": "each measurement's requests", "duration_s": "measurements.sweep.duration",
    "warmup": "each measurement's warmup",
}
SCENARIO_NOT_OFFERED = {  # key -> why a study does not take it
    "rate": "a study compares checkpoints at the same concurrency levels",
    "arrival": "open loop is not a study measurement", "max_in_flight": "open loop only",
    "max_rate": "a study measures unthrottled levels",
    "trace": "a trace replaces the study's levels", "trace_speedup": "with trace",
    "trace_block_tokens": "with trace", "profile": "a profile replaces the study's levels",
    "profile_rates": "with profile", "saturation_concurrency": "with profile",
    "save_requests": "one file per run: a study runs many", "hdr_log": "as save_requests",
    "hdr_interval_s": "with hdr_log", "graceful_stop_s": "the study's own", "ramp_up_s":
    "the study's levels start at once", "ray": "studies run in one process or --workers",
    "server_metrics_interval_s": "phases read the server's facts once",
}
_TARGET_PARTS = ("target",)


def _option_check(f: OptionField) -> Check:
    """The option's own bounds and choices, as a scenario check (a message, or None)."""
    def check(value: Any) -> str | None:
        try:
            f.value([value] if f.spec.item is not None else value)
        except ConfigError as exc:
            return str(exc).removeprefix(f.key + " ")
        return None
    return check


def option_reader(f: OptionField) -> Any:
    """A scenario reader for run option ``f`` (its type, bounds and choices)."""
    kind = f.spec.item or f.base_type
    check = _option_check(f)
    if f.spec.item is int:
        return IntegerList(check)
    reader = {bool: lambda: Boolean(), int: lambda: Integer(check),
              float: lambda: Number(check)}.get(kind, lambda: Text(check))()
    return ListOf(reader, "value") if f.spec.item is not None else reader


def scenario_request_options() -> list[OptionField]:
    """The run options of the ``request:`` section."""
    return [f for f in run_options() if f.part not in _TARGET_PARTS
            and f.key not in SCENARIO_ELSEWHERE and f.key not in SCENARIO_NOT_OFFERED]


REQUEST = Section({
    **{f.key: option_reader(f) for f in scenario_request_options()},
    "prompts": Text(non_empty),  # JSONL sent in file order, relative to the scenario file
})

SINGLE_STREAM = Section({"enabled": Boolean(), "requests": Integer(positive),
                         "output_tokens": Integer(output_count), "warmup": Integer(non_negative)})
FIXED_LENGTH = Section({"enabled": Boolean(), "output_tokens": Integer(output_count),
                        "repeats": Integer(positive)})
SWEEP = Section({"enabled": Boolean(), "concurrency": IntegerList(positive),
                 "requests": Integer(positive), "requests_per_stream": Integer(positive),
                 "duration": Number(positive), "output_tokens": Integer(output_count),
                 "warmup": Integer(non_negative), "workers": WorkerCount()})
FIDELITY = Section({"enabled": Boolean(), "seed": Integer(), "max_tokens": Integer(output_count)})
KNEE = Section({"enabled": Boolean(), "slo": TextList(slo_check), "rate_search": Boolean(),
               "start": Number(positive), "precision": Number(fraction),
               "max_probes": Integer(positive), "duration": Number(positive),
               "output_tokens": Integer(output_count), "warmup": Integer(non_negative)},
              required=("slo",))
MEASUREMENTS = Section({"single_stream": SINGLE_STREAM, "fixed_length": FIXED_LENGTH,
                        "sweep": SWEEP, "fidelity": FIDELITY, "knee": KNEE})

TARGET = Section({  # the run options of the target, ``url`` its URL
    **{f.name: option_reader(f) for f in run_options() if f.part in _TARGET_PARTS},
    "url": Text(url_check), "endpoint_url": Text(url_check),
}, required=("url",), shorthand="url")

DEPLOY = Section({
    "image": Text(non_empty), "role": Text(non_empty), "model_id": Text(non_empty),
    "name": Text(non_empty), "env": TextMap(), "instance_type": Text(non_empty),
    "instance_count": Integer(positive), "region": Text(non_empty),
    "endpoint_url": Text(url_check), "runtime_endpoint_url": Text(url_check),
    "startup_timeout": Number(positive), "inference_ami_version": Text(non_empty),
    "tags": TextMap(), "payload_format": Text(one_of(*PAYLOAD_FORMATS)),
    "metrics_frequency": Integer(publish_frequency), "detailed_observability": Boolean(),
}, required=("image", "role"))

SERVER = Section({
    "command": Command(), "model": Text(non_empty), "env": TextMap(), "host": Text(non_empty),
    "port": Integer(port_check), "ready_timeout": Number(positive),
    "stop_grace": Number(positive), "keep_running": Boolean(),
}, required=("command",))

PHASE = Section({
    "label": Text(label_check), "checkpoint": Text(non_empty), "model": Text(non_empty),
    "target": TARGET, "deploy": DEPLOY, "server": SERVER, "notes": Text(),
}, required=("label", "checkpoint"))


def _sim_field_reader(default: Any):
    if isinstance(default, bool):
        return Boolean()
    if isinstance(default, int):
        return Integer(non_negative)
    if isinstance(default, float):
        return Number(non_negative)
    return Text()


SIM_PROFILE = Section({
    "preset": Text(non_empty),
    "fidelity_seed": Integer(), "fidelity_wrong_rate": Number(fraction),
    **{f.name: _sim_field_reader(f.default) for f in fields(SimProfile) if f.name != "model"},
})
SIMULATE = Section({"time_scale": Number(positive), "profiles": MapOf(SIM_PROFILE)})

SCENARIO = Section({
    "name": Text(non_empty), "description": Text(), "hardware": HARDWARE, "request": REQUEST,
    "measurements": MEASUREMENTS, "phases": ListOf(PHASE, "phase"), "simulate": SIMULATE,
    "drift_tolerance": Number(lambda v: None if 0 < v < 1 else
                              f"must be a fraction between 0 and 1 (0.05 = 5%), got {v:g}"),
}, required=("name", "hardware", "measurements", "phases"))


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class Hardware:
    instance_type: str
    gpu: str | None = None
    region: str | None = None
    price_per_hour: float | None = None  # USD per instance-hour; None: no cost figures
    currency: str = "USD"


@dataclass(frozen=True)
class RequestDefaults:
    """The ``request:`` section: the run options it set (public names and values), read
    as attributes with the run description's defaults for the others (defined once)."""

    values: dict[str, Any] = field(default_factory=dict)
    prompts: str | None = None  # JSONL path, relative to the scenario file

    def __getattr__(self, name: str) -> Any:
        if name in ("values", "prompts") or name.startswith("__"):
            raise AttributeError(name)
        for f in scenario_request_options():
            if f.key == name:
                return self.values.get(name, f.public_default())
        raise AttributeError(name)


@dataclass(frozen=True)
class SingleStream:
    enabled: bool = True
    requests: int = 5
    output_tokens: int = 256
    warmup: int = 1


@dataclass(frozen=True)
class FixedLength:
    enabled: bool = True
    output_tokens: int = 512
    repeats: int = 3


@dataclass(frozen=True)
class SweepSpec:
    enabled: bool = True
    concurrency: tuple[int, ...] = (1, 4, 16)
    requests: int | None = None
    requests_per_stream: int | None = None  # requests = this x concurrency, per level
    duration: float | None = None
    output_tokens: int = 256
    warmup: int = 0
    # Worker processes generating each level: "auto" (RunConfig's default) or a count.
    workers: int | str = default(RunConfig, "workers")

    def requests_at(self, concurrency: int) -> int | None:
        if self.requests_per_stream is not None:
            return self.requests_per_stream * concurrency
        return self.requests


@dataclass(frozen=True)
class FidelitySpec:
    enabled: bool = True
    seed: int = 0
    max_tokens: int = 64


_SEARCH = Measurement()  # the search's defaults: --profile slo-search's


@dataclass(frozen=True)
class KneeSpec:
    """``measurements.knee``: an SLO search per phase (:mod:`loadgen.knee`); on when the
    block is there. Its defaults are ``--profile slo-search``'s."""

    enabled: bool = False
    slo: tuple[str, ...] = ()
    rate_search: bool = _SEARCH.rate_search
    start: float = 1
    precision: float = _SEARCH.search_precision
    max_probes: int = _SEARCH.max_probes
    duration: float | None = None  # None: each probe runs 4 waves of its concurrency
    output_tokens: int = 256
    warmup: int = 0  # requests before each probe, not measured


@dataclass(frozen=True)
class Measurements:
    single_stream: SingleStream = SingleStream()
    fixed_length: FixedLength = FixedLength()
    sweep: SweepSpec = SweepSpec()
    fidelity: FidelitySpec = FidelitySpec()
    knee: KneeSpec = KneeSpec()


# A phase's running server is the run description's TargetSpec (url required by the shape).


@dataclass(frozen=True)
class PhaseDeployBlock:
    """A phase's ``deploy:`` block as the scenario file says it: a SageMaker deployment made
    before the phase and deleted after it (:func:`loadgen.scenario.deploy.aws_spec` turns it
    into the control plane's :class:`loadgen.aws.DeploySpec`)."""

    image: str
    role: str
    model_id: str  # SM_VLLM_MODEL (defaults to the phase's model)
    instance_type: str  # defaults to hardware.instance_type
    region: str | None = None  # defaults to hardware.region
    name: str | None = None  # endpoint name; default loadgen-<scenario>-<label>-<time>
    env: dict[str, str] = field(default_factory=dict)
    instance_count: int = 1
    endpoint_url: str | None = None  # SageMaker control plane (tests, VPC endpoints)
    runtime_endpoint_url: str | None = None  # SageMaker runtime, for the measurements
    startup_timeout: float = 1800.0
    inference_ami_version: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    payload_format: str = "auto"
    metrics_frequency: int = default(EndpointMetricsConfig, "frequency_s")
    detailed_observability: bool = default(EndpointMetricsConfig, "detailed_observability")


@dataclass(frozen=True)
class PhaseServerBlock:
    """A phase's ``server:`` block: a server loadgen starts before the phase and stops
    after it (:mod:`loadgen.scenario.servers`; defaults are :mod:`loadgen.servers.spec`'s).
    ``keep_running``: leave it up for later phases of the same checkpoint (A-B-A with
    both servers in memory), stopped when the run ends."""

    command: tuple[str, ...]
    model: str | None = None  # defaults to the phase's model
    env: dict[str, str] = field(default_factory=dict)
    host: str | None = None  # user@vm over ssh; None: this machine
    port: int = DEFAULT_PORT
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S
    stop_grace: float = DEFAULT_STOP_GRACE_S
    keep_running: bool = False


@dataclass(frozen=True)
class Phase:
    label: str
    checkpoint: str
    order_index: int  # position in the file: the study order (A-B-A)
    model: str | None = None
    target: TargetSpec | None = None
    deploy: PhaseDeployBlock | None = None
    server: PhaseServerBlock | None = None
    notes: str | None = None
    line: int = 0


@dataclass(frozen=True)
class SimCheckpoint:
    """How ``--simulate`` plays one checkpoint: a preset plus field overrides."""

    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    fidelity_seed: int | None = None  # default: derived from the checkpoint name
    fidelity_wrong_rate: float = 0.2  # share of a + b - c questions answered wrong
    line: int = 0


@dataclass(frozen=True)
class SimulateSpec:
    time_scale: float = 1.0
    profiles: dict[str, SimCheckpoint] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    hardware: Hardware
    measurements: Measurements
    phases: tuple[Phase, ...]
    request: RequestDefaults = RequestDefaults()
    simulate: SimulateSpec | None = None
    description: str | None = None
    drift_tolerance: float = 0.05
    path: str | None = None  # the file it was read from
    sha256: str | None = None  # of the file's bytes: which scenario produced a result
    params_used: tuple[str, ...] = ()  # names only: values may be private

    def phase(self, label: str) -> Phase:
        return next(p for p in self.phases if p.label == label)

    def select(self, labels: list[str] | None) -> list[Phase]:
        """The phases to run, in file order; unknown labels are an error."""
        if not labels:
            return list(self.phases)
        known = [p.label for p in self.phases]
        unknown = [label for label in labels if label not in known]
        if unknown:
            raise ConfigError(f"--phases: no phase labelled {', '.join(map(repr, unknown))}; "
                              f"this scenario has {', '.join(known)}")
        return [p for p in self.phases if p.label in labels]
