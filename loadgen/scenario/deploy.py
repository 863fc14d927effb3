"""A phase's ``deploy`` block: create the SageMaker endpoint before the phase, delete
it after, whatever happens in between (failure, Ctrl-C).

The control plane is blocking boto3 (:mod:`loadgen.aws`), so it runs in a worker
thread; a stop of the run (Ctrl-C) sets the deploy's ``cancel`` event. Every step
is written to a deployment record (``DIR/deployments/phase-<label>.deployment.json``)
so that ``loadgen endpoint delete --record FILE`` can always finish a teardown that
was itself interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from pathlib import Path
from typing import AsyncIterator, Callable

from ..engine import RunControl
from ..errors import LoadgenError
from ..results import server_section
from .phase import Endpoint, PhaseDoc
from .schema import Phase, PhaseDeployBlock, Scenario

Log = Callable[[str], None]
_NOT_NAME = re.compile(r"[^A-Za-z0-9]+")


def endpoint_name(scenario_name: str, label: str, now: float | None = None) -> str:
    """A SageMaker-valid, recognisable, unique-per-minute endpoint name (<= 63 chars)."""
    stamp = time.strftime("%m%d%H%M", time.gmtime(now))
    base = _NOT_NAME.sub("-", f"lg-{scenario_name}")[: 63 - len(label) - len(stamp) - 2]
    name = _NOT_NAME.sub("-", f"{base.strip('-')}-{label}-{stamp}")
    return name.strip("-")[:63]


def record_path(out_dir: Path, label: str) -> Path:
    return out_dir / "deployments" / f"phase-{label}.deployment.json"


def aws_spec(scenario: Scenario, phase: Phase, spec: PhaseDeployBlock, environ=os.environ):
    """The control plane's DeploySpec for a phase's deploy block. HF_TOKEN (gated models)
    comes from the environment, never from the scenario file, and is never written anywhere."""
    from ..aws import DeploySpec, with_hf_token
    from ..cloudwatch_settings import EndpointMetricsConfig

    env = with_hf_token(spec.env, environ)
    tags = {**spec.tags, "loadgen:scenario": scenario.name[:256], "loadgen:phase": phase.label}
    return DeploySpec(
        name=spec.name or endpoint_name(scenario.name, phase.label), image=spec.image,
        role_arn=spec.role, model_id=spec.model_id, environment=env,
        instance_type=spec.instance_type, instance_count=spec.instance_count,
        startup_timeout_s=int(spec.startup_timeout), tags=tags,
        inference_ami_version=spec.inference_ami_version,
        metrics=EndpointMetricsConfig(spec.metrics_frequency, spec.detailed_observability))


def _status_printer(log: Log, what: str) -> Callable[[str, float], None]:
    last: list[str] = []

    def on_status(status: str, elapsed_s: float) -> None:
        if not last or last[-1] != status:  # polls repeat the same status every few seconds
            last.append(status)
            log(f"{what}: {status} ({elapsed_s:.0f} s)")

    return on_status


def server_facts(dep) -> dict:
    """The phase file's ``server`` block from a deployment record."""
    return server_section("deployment", dep.facts,
                          time_to_in_service_s=dep.seconds_to_in_service,
                          aws_time_to_in_service_s=dep.aws_seconds_to_in_service,
                          endpoint_name=dep.endpoint_name, region=dep.region,
                          instance_type=(dep.spec or {}).get("instance_type"))


@contextlib.asynccontextmanager
async def deployed(scenario: Scenario, phase: Phase, out_dir: Path, doc: PhaseDoc,
                   control: RunControl, log: Log) -> AsyncIterator[Endpoint]:
    """Deploy, yield the endpoint to measure, and always tear down what was created."""
    from ..aws import DeployCancelled, DeployFailed, deploy_endpoint

    spec = phase.deploy
    assert spec is not None
    path = record_path(out_dir, phase.label)
    cancel = threading.Event()
    # A stop of the run (Ctrl-C) cancels the deploy running in its worker thread.
    forget = control.on_stop(cancel.set)
    if control.stopped:
        cancel.set()
    dep = None
    try:
        try:
            request = aws_spec(scenario, phase, spec)
            log(f"deploying {request.model_id} on {request.instance_type} as endpoint "
                f"{request.name} (about 10 minutes)")
            dep = await asyncio.to_thread(
                deploy_endpoint, request, region=spec.region, endpoint_url=spec.endpoint_url,
                record_path=path, on_status=_status_printer(log, "deploy"), cancel=cancel)
        except (DeployFailed, DeployCancelled) as exc:
            dep = exc.deployment
            raise
        doc.server.update(server_facts(dep))
        doc.data["deployment"] = dep.to_json()
        doc.save()
        log(f"InService after {dep.seconds_to_in_service} s")
        yield Endpoint(url=f"sagemaker://{dep.endpoint_name}",
                       sagemaker={"region": dep.region, "endpoint_url": spec.runtime_endpoint_url,
                                  "payload_format": spec.payload_format})
    except BaseException:
        forget()
        # The phase failed or was stopped: tear down, but let its own error be the one raised.
        await _teardown(dep, path, doc, log, raise_errors=False)
        raise
    else:
        forget()
        await _teardown(dep, path, doc, log, raise_errors=True)


async def _teardown(dep, path: Path, doc: PhaseDoc, log: Log, raise_errors: bool) -> None:
    """Delete what the record names; a failure is written down and shouted about."""
    from ..aws import delete_deployment, load_record

    if dep is None and path.exists():  # interrupted between two record writes
        dep = load_record(path)
    if dep is None:
        return
    doc.data["deployment"] = dep.to_json()
    if not dep.is_live:
        return
    log(f"deleting endpoint {dep.endpoint_name} (and its config and model)")
    try:
        teardown = await asyncio.to_thread(delete_deployment, dep,
                                           on_status=_status_printer(log, "teardown"))
    except LoadgenError as exc:
        message = (f"teardown of endpoint {dep.endpoint_name} failed, it may still be billing: "
                   f"{exc}; finish it with: loadgen endpoint delete --record {path}")
        doc.data["teardown"] = {"error": message, "record": str(path)}
        doc.save()
        log(f"WARNING: {message}")
        if raise_errors:
            raise LoadgenError(message) from None
        return
    doc.data["teardown"] = {"deleted": list(teardown.deleted),
                            "already_gone": list(teardown.already_gone),
                            "seconds": teardown.seconds}
    doc.data["deployment"]["status"] = "Deleted"
    doc.save()
    log(f"deleted: {', '.join(teardown.deleted) or 'nothing was left'}")
