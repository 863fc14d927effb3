"""From a read scenario (:class:`~loadgen.scenario.nodes.Block`) to the dataclasses.

First the checks that span sections, each with the line it is about: unique phase
labels, exactly one of target/deploy/server, a model for each deploy, a sweep that can end,
something to measure, a valid simulator profile for every checkpoint. Only when no
problem was found anywhere are the frozen dataclasses of :mod:`.schema` built.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..targetspec import target_kind
from .nodes import Block, Problem
from .schema import (
    FidelitySpec,
    FixedLength,
    Hardware,
    KneeSpec,
    Measurements,
    Phase,
    PhaseDeployBlock,
    PhaseServerBlock,
    RequestDefaults,
    Scenario,
    SimCheckpoint,
    SimulateSpec,
    SingleStream,
    SweepSpec,
    TargetSpec,
)


def build_scenario(root: Block, problems: list[Problem]) -> Scenario | None:
    """Cross-section checks (appended to ``problems``), then the dataclasses, or None
    when anything is wrong."""
    phases = root.get("phases") or []
    _check_phases(phases, problems)
    _check_measurements(root.get("measurements"), problems)
    _check_simulate(root.get("simulate"), phases, problems)
    if problems:
        return None
    hardware = Hardware(**root.values["hardware"].values)
    return Scenario(
        name=root.values["name"], hardware=hardware,
        measurements=_measurements(root.values["measurements"]),
        phases=tuple(_phase(block, i, hardware) for i, block in enumerate(phases)),
        request=_request(root.get("request", Block({})).values),
        simulate=_simulate(root.get("simulate")), description=root.get("description"),
        drift_tolerance=root.get("drift_tolerance", 0.05))


def _check_phases(phases: list[Block], problems: list[Problem]) -> None:
    first_line: dict[str, int] = {}
    for i, phase in enumerate(phases):
        where = f"phases[{i}]"
        label = phase.get("label")
        if label is not None:
            if label in first_line:
                problems.append(Problem(phase.line_for("label"),
                                        f"{where}: duplicate phase label {label!r} (also on "
                                        f"line {first_line[label]}); labels must be unique, "
                                        "e.g. bf16-a, qat, bf16-b"))
            else:
                first_line[label] = phase.line_for("label")
        given = [key for key in ("target", "deploy", "server") if key in phase.lines]
        if len(given) > 1:
            problems.append(Problem(phase.line_for(given[1]),
                                    f"{where}: give one of target (a running server), deploy "
                                    "(a SageMaker endpoint loadgen creates) or server (a "
                                    f"process loadgen starts), not {' and '.join(given)}"))
        elif not given:
            problems.append(Problem(phase.line, f"{where}: missing target, deploy or server: "
                                                "say which server this phase measures"))
        server = phase.get("server")
        if server is not None:
            _check_server(server, phase.get("model"), where, problems)
        target = phase.get("target")
        if target is not None and _kind(target.get("url")) != "sagemaker":
            for key in TargetSpec(**{**target.values, "url": None}).given_sagemaker_options():
                problems.append(Problem(target.line_for(key), f"{where}.target.{key}: only "
                                        "applies to sagemaker:// targets; remove it"))
        deploy = phase.get("deploy")
        if deploy is not None and "model_id" not in deploy.values and "model" not in phase.values:
            problems.append(Problem(deploy.line, f"{where}.deploy: missing model_id (or the "
                                                 "phase's model): the checkpoint to serve"))


def _check_server(server: Block, model: str | None, where: str,
                  problems: list[Problem]) -> None:
    """What :func:`loadgen.servers.spec_problems` finds, at the server block's lines."""
    from ..servers.spec import spec_problems

    if "command" not in server.values:
        return  # missing or unreadable: reported already
    for message in spec_problems(_server_values(server, model)):
        key = next((k for k, word in (("host", "host"), ("port", "port"), ("env", "environment"),
                                      ("command", "command")) if word in message), "command")
        problems.append(Problem(server.line_for(key), f"{where}.server: {message}"))


def _server_values(server: Block, model: str | None) -> dict:
    """A server block as ServerSpec keywords (the phase's model when it names none)."""
    values = dict(server.values)
    spec = {"command": values["command"], "model": values.get("model", model),
            "env": values.get("env", {}), "host": values.get("host"),
            "port": values.get("port"), "ready_timeout_s": values.get("ready_timeout"),
            "stop_grace_s": values.get("stop_grace")}
    return {k: v for k, v in spec.items() if v is not None}


def _check_measurements(block: Block | None, problems: list[Problem]) -> None:
    if block is None:
        return
    sweep = block.get("sweep")
    if sweep is not None and sweep.get("enabled", True):
        if "requests" in sweep.values and "requests_per_stream" in sweep.values:
            problems.append(Problem(sweep.line_for("requests_per_stream"),
                                    "measurements.sweep: give requests or requests_per_stream, "
                                    "not both"))
        if not ({"requests", "requests_per_stream", "duration"} & set(sweep.lines)):
            problems.append(Problem(sweep.line, "measurements.sweep: say when each level ends: "
                                                "requests, requests_per_stream or duration"))
    enabled = [name for name in ("single_stream", "fixed_length", "sweep", "fidelity", "knee")
               if (section := block.get(name)) is not None and section.get("enabled", True)]
    if not enabled:
        problems.append(Problem(block.line, "measurements: nothing to measure; add "
                                            "single_stream, fixed_length, sweep, fidelity "
                                            "or knee"))


def _check_simulate(block: Block | None, phases: list[Block], problems: list[Problem]) -> None:
    if block is None:
        return
    from .simulate import base_profile  # the presets live with the simulation code

    profiles = block.get("profiles")
    if profiles is None:
        return
    for name, entry in profiles.values.items():
        try:
            base_profile(sim_checkpoint(entry))
        except ConfigError as exc:
            problems.append(Problem(entry.line, f"simulate.profiles.{name}: {exc}"))
    for i, phase in enumerate(phases):
        checkpoint = phase.get("checkpoint")
        if checkpoint is not None and checkpoint not in profiles.values:
            problems.append(Problem(phase.line_for("checkpoint"),
                                    f"phases[{i}]: no simulator profile for checkpoint "
                                    f"{checkpoint!r}: add simulate.profiles.{checkpoint}"))


def _measurements(block: Block) -> Measurements:
    def section(name: str, cls: type) -> Any:
        part = block.get(name)
        return cls(**part.values) if part is not None else cls()

    knee = block.get("knee")  # an SLO search: on when its block is there
    return Measurements(section("single_stream", SingleStream),
                        section("fixed_length", FixedLength), section("sweep", SweepSpec),
                        section("fidelity", FidelitySpec),
                        KneeSpec(**{"enabled": True, **knee.values}) if knee else KneeSpec())


def _kind(url: object) -> str | None:
    """The target's kind (the one parser: loadgen.targetspec), None for a bad URL (the
    url key reported it)."""
    try:
        return target_kind(url) if isinstance(url, str) else None
    except ConfigError:
        return None


def _request(values: dict) -> RequestDefaults:
    values = dict(values)
    prompts = values.pop("prompts", None)
    return RequestDefaults(values, prompts)


def _phase(block: Block, index: int, hardware: Hardware) -> Phase:
    values = dict(block.values)
    target = values.pop("target", None)
    deploy = values.pop("deploy", None)
    server = values.pop("server", None)
    if server is not None:
        s = dict(server.values)
        s.setdefault("model", values.get("model"))
        server = PhaseServerBlock(**s)
    if target is not None and "${" in str(target.values.get("url")):
        target = None  # a parameter left unset by a lenient (--simulate) check: not used
    elif target is not None:
        target = TargetSpec(**target.values)
    if deploy is not None:
        d = dict(deploy.values)
        d.setdefault("model_id", values.get("model"))
        d.setdefault("instance_type", hardware.instance_type)
        d.setdefault("region", hardware.region)
        deploy = PhaseDeployBlock(**d)
    return Phase(order_index=index, target=target, deploy=deploy, server=server,
                 line=block.line, **values)


def sim_checkpoint(block: Block) -> SimCheckpoint:
    """A ``simulate.profiles.NAME`` block: the preset, our own keys, the rest overrides."""
    values = dict(block.values)
    return SimCheckpoint(preset=values.pop("preset", None),
                         fidelity_seed=values.pop("fidelity_seed", None),
                         fidelity_wrong_rate=values.pop("fidelity_wrong_rate", 0.2),
                         overrides=values, line=block.line)


def _simulate(block: Block | None) -> SimulateSpec | None:
    if block is None:
        return None
    profiles = block.get("profiles")
    entries = {name: sim_checkpoint(entry) for name, entry in (profiles.values.items() if profiles else ())}
    return SimulateSpec(time_scale=block.get("time_scale", 1.0), profiles=entries)
