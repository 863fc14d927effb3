"""What a scenario file holds: the declared shape of every section, and the frozen
dataclasses the runner works with.

The shape (``SCENARIO`` below) is read by :mod:`loadgen.scenario.nodes`, which reports
every problem with its line; :func:`loadgen.scenario.build.build_scenario` then runs
the checks that span sections (unique labels, target xor deploy, a simulator profile
per checkpoint, ...) and only builds the dataclasses when nothing is wrong.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from ..bounds import host_problem, input_tokens_problem, output_tokens_problem, shown
from ..codecs.sagemaker_formats import PAYLOAD_FORMATS
from ..config import APIS, RequestOptions, Timeouts
from ..errors import ConfigError
from ..runconfig import TargetConfig, default
from ..servers.spec import DEFAULT_PORT, DEFAULT_READY_TIMEOUT_S, DEFAULT_STOP_GRACE_S
from ..simulator.profile import SimProfile
from ..slo import parse_slo
from ..workload.prompts import PromptSource
from ..workload.settings import WorkloadSettings
from .nodes import (
    Boolean,
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
)

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # becomes part of a file name


# --------------------------------------------------------------------------- checks


def positive(value: float) -> str | None:
    return None if value > 0 and math.isfinite(value) else f"must be > 0, got {value:g}"


def input_count(value: int) -> str | None:
    """A positive token count within the input bound (:mod:`loadgen.bounds`)."""
    return positive(value) or input_tokens_problem(value, "is")


def output_count(value: int) -> str | None:
    """A positive token count within the output bound (:mod:`loadgen.bounds`)."""
    return positive(value) or output_tokens_problem(value, "is")


def non_negative(value: float) -> str | None:
    return None if value >= 0 and math.isfinite(value) else f"must be >= 0, got {value:g}"


def fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else f"must be between 0 and 1, got {value:g}"


def one_of(*choices: str):
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"
    return check


def url_check(value: str) -> str | None:
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unclosed [IPv6 bracket
        parts = urlsplit("")
    if parts.scheme in ("http", "https", "sagemaker") and parts.netloc:
        return host_problem(value) if parts.scheme != "sagemaker" else None
    return f"must be http(s)://HOST:PORT or sagemaker://ENDPOINT_NAME, got {shown(value)}"


def label_check(value: str) -> str | None:
    if _LABEL.match(value):
        return None
    return (f"must be letters, digits, '.', '_' or '-' (it names the file phase-LABEL.json), "
            f"got {value!r}")


def price(value: float) -> str | None:
    if value > 0 and math.isfinite(value):
        return None
    return f"must be a positive number of dollars per hour (e.g. 1.1267), got {value:g}"


def non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def slo_check(value: str) -> str | None:
    try:
        parse_slo(value)
    except ConfigError as exc:
        return str(exc).replace("--slo ", "SLO ", 1)
    return None


# --------------------------------------------------------------------------- the shape

HARDWARE = Section({
    "instance_type": Text(non_empty), "gpu": Text(), "region": Text(),
    "price_per_hour": Number(price), "currency": Text(non_empty),
}, required=("instance_type",))

REQUEST = Section({
    "api": Text(one_of(*APIS)), "temperature": Number(non_negative),
    "input_tokens": Integer(input_count), "ignore_eos": Boolean(), "stream": Boolean(),
    "continuous_usage": Boolean(), "timeout": Number(positive), "idle_timeout": Number(positive),
    "connect_timeout": Number(positive), "api_key_env": Text(non_empty), "prompts": Text(non_empty),
})

SINGLE_STREAM = Section({"enabled": Boolean(), "requests": Integer(positive),
                         "output_tokens": Integer(output_count), "warmup": Integer(non_negative)})
FIXED_LENGTH = Section({"enabled": Boolean(), "output_tokens": Integer(output_count),
                        "repeats": Integer(positive)})
SWEEP = Section({"enabled": Boolean(), "concurrency": IntegerList(positive),
                 "requests": Integer(positive), "requests_per_stream": Integer(positive),
                 "duration": Number(positive), "output_tokens": Integer(output_count),
                 "warmup": Integer(non_negative), "workers": Integer(positive)})
FIDELITY = Section({"enabled": Boolean(), "seed": Integer(), "max_tokens": Integer(output_count)})
KNEE = Section({"enabled": Boolean(), "slo": TextList(slo_check), "rate_search": Boolean(),
               "start": Number(positive), "precision": Number(fraction),
               "max_probes": Integer(positive), "duration": Number(positive),
               "output_tokens": Integer(output_count), "warmup": Integer(non_negative)},
              required=("slo",))
MEASUREMENTS = Section({"single_stream": SINGLE_STREAM, "fixed_length": FIXED_LENGTH,
                        "sweep": SWEEP, "fidelity": FIDELITY, "knee": KNEE})

TARGET = Section({
    "url": Text(url_check), "region": Text(non_empty), "endpoint_url": Text(url_check),
    "inference_component": Text(non_empty), "custom_attributes": Text(),
    "target_variant": Text(non_empty), "payload_format": Text(one_of(*PAYLOAD_FORMATS)),
}, required=("url",), shorthand="url")

DEPLOY = Section({
    "image": Text(non_empty), "role": Text(non_empty), "model_id": Text(non_empty),
    "name": Text(non_empty), "env": TextMap(), "instance_type": Text(non_empty),
    "instance_count": Integer(positive), "region": Text(non_empty),
    "endpoint_url": Text(url_check), "runtime_endpoint_url": Text(url_check),
    "startup_timeout": Number(positive), "inference_ami_version": Text(non_empty),
    "tags": TextMap(), "payload_format": Text(one_of(*PAYLOAD_FORMATS)),
}, required=("image", "role"))

def port_check(value: int) -> str | None:
    return None if 0 <= value < 65536 else f"must be 1-65535 (0: a free port), got {value}"


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
    """The ``request:`` section; its defaults are the run configuration's (defined once)."""

    api: str = default(RequestOptions, "api")
    temperature: float = default(RequestOptions, "temperature")
    input_tokens: int = default(PromptSource, "input_tokens")
    ignore_eos: bool = default(RequestOptions, "ignore_eos")
    stream: bool = default(RequestOptions, "stream")
    continuous_usage: bool = default(RequestOptions, "continuous_usage")
    timeout: float = default(Timeouts, "total_s")
    idle_timeout: float = default(Timeouts, "idle_s")
    connect_timeout: float = default(Timeouts, "connect_s")
    api_key_env: str = default(RequestOptions, "api_key_env")
    prompts: str | None = None  # JSONL path, relative to the scenario file


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
    workers: int = 1  # worker processes generating each level (see loadgen.workers)

    def requests_at(self, concurrency: int) -> int | None:
        if self.requests_per_stream is not None:
            return self.requests_per_stream * concurrency
        return self.requests


@dataclass(frozen=True)
class FidelitySpec:
    enabled: bool = True
    seed: int = 0
    max_tokens: int = 64


@dataclass(frozen=True)
class KneeSpec:
    """``measurements.knee``: an SLO search per phase (:mod:`loadgen.knee`); on when the
    block is there. Its defaults are ``--profile slo-search``'s."""

    enabled: bool = False
    slo: tuple[str, ...] = ()
    rate_search: bool = default(WorkloadSettings, "rate_search")
    start: float = 1
    precision: float = default(WorkloadSettings, "search_precision")
    max_probes: int = default(WorkloadSettings, "max_probes")
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


# A phase's running server: the run configuration's target (url required by the shape).
TargetSpec = TargetConfig


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
