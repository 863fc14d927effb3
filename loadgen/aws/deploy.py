"""Deploy a SageMaker endpoint (model -> endpoint config -> endpoint) and time it to InService.

Blocking boto3 is fine here: this is the control plane, never on the request
path. Callers in an event loop run :func:`deploy_endpoint` in a thread
(``asyncio.to_thread``) and pass a ``threading.Event`` as ``cancel``.

The deployment record is saved before each create call (names planned) and
after it, so teardown can always find what exists, whatever interrupts us.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import AwsError, ConfigError, LoadgenError
from ..record import now_iso
from ..redact import is_secret_name, redact_environment
from ..targets.sagemaker import is_endpoint_name
from .errors import aws_call
from .logs import endpoint_facts, tail_endpoint_log
from .metrics_config import EndpointMetricsConfig, metrics_config_argument
from .record import (
    DELETED,
    ENDPOINT,
    ENDPOINT_CONFIG,
    MODEL,
    Deployment,
    load_record,
)
from .resources import (
    CREATED_BY_TAG,
    ENDPOINT_TAG,
    IN_PROGRESS,
    RUN_ID_TAG,
    Resources,
    StatusCallback,
    delete_resources,
    describe_endpoint_or_none,
)
from .session import AwsConfig

DEFAULT_INSTANCE_TYPE = "ml.g6.xlarge"
VARIANT_NAME = "AllTraffic"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env(items: Iterable[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The container environment from ``KEY=VALUE`` or ``KEY`` (value from ``environ``),
    plus ``HF_TOKEN`` from ``environ`` (:func:`with_hf_token`)."""
    env: dict[str, str] = {}
    for item in items:
        key, has_value, value = item.partition("=")
        if not _ENV_NAME.fullmatch(key):
            raise ConfigError(f"--env {key!r}: expected KEY=VALUE with KEY made of letters, digits and _")
        if not has_value:
            if key not in environ:
                raise ConfigError(f"--env {key}: {key} is not set in your environment; pass --env {key}=VALUE")
            value = environ[key]
        env[key] = value
    return with_hf_token(env, environ)


def with_hf_token(env: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``env`` plus ``HF_TOKEN`` (gated models) from ``environ`` when it is set there and
    ``env`` has none: the token comes from the environment, never from a file or an option,
    and the record masks it."""
    env = dict(env)
    if "HF_TOKEN" not in env and environ.get("HF_TOKEN"):
        env["HF_TOKEN"] = environ["HF_TOKEN"]
    return env


@dataclass(frozen=True)
class DeploySpec:
    """What to deploy. Instance types are not checked here: SageMaker decides."""

    name: str  # the endpoint name
    image: str  # container image URI (e.g. the AWS vLLM DLC)
    role_arn: str  # SageMaker execution role
    model_id: str | None = None  # becomes SM_VLLM_MODEL
    environment: Mapping[str, str] = field(default_factory=dict)  # other SM_VLLM_*, HF_TOKEN, ...
    instance_type: str = DEFAULT_INSTANCE_TYPE
    instance_count: int = 1
    startup_timeout_s: int | None = None  # ContainerStartupHealthCheckTimeoutInSeconds
    inference_ami_version: str | None = None  # e.g. al2-ami-sagemaker-inference-gpu-3-1
    tags: Mapping[str, str] = field(default_factory=dict)
    metrics: EndpointMetricsConfig = EndpointMetricsConfig()  # the endpoint config's MetricsConfig

    def validate(self) -> None:
        if not is_endpoint_name(self.name):
            raise ConfigError(
                f"endpoint name {self.name!r} is not valid for SageMaker: use 1-63 letters, digits and hyphens, "
                "starting and ending with a letter or digit"
            )
        for what, value in (("--image", self.image), ("--role", self.role_arn)):
            if not value:
                raise ConfigError(f"{what} is required to deploy an endpoint")
        if self.instance_count < 1:
            raise ConfigError(f"--instance-count must be at least 1, not {self.instance_count}")
        if self.model_id and "SM_VLLM_MODEL" in self.environment and self.environment["SM_VLLM_MODEL"] != self.model_id:
            raise ConfigError("both --model-id and --env SM_VLLM_MODEL=... given; use only --model-id")
        self.metrics.validate()

    def container_environment(self) -> dict[str, str]:
        environment = dict(self.environment)
        if self.model_id:
            environment["SM_VLLM_MODEL"] = self.model_id
        return environment

    def secret_values(self) -> list[str]:
        return [value for key, value in self.environment.items() if is_secret_name(key) and value]

    def describe(self) -> dict[str, Any]:
        """JSON-able and secret-free, for the record and the console."""
        return {
            "image": self.image,
            "model_id": self.model_id,
            "instance_type": self.instance_type,
            "instance_count": self.instance_count,
            "role_arn": self.role_arn,
            "environment": redact_environment(self.container_environment()),
            "startup_timeout_s": self.startup_timeout_s,
            "inference_ami_version": self.inference_ami_version,
            "tags": dict(self.tags),
            "metrics_config": self.metrics.to_api(),
        }


class DeployFailed(AwsError):
    """The endpoint reached Failed, vanished, or was not InService in time; ``.deployment`` has the record."""

    def __init__(self, message: str, deployment: Deployment) -> None:
        super().__init__(message)
        self.deployment = deployment


class DeployCancelled(LoadgenError):
    """``cancel`` was set while deploying; ``.deployment`` lists what exists (delete it)."""

    exit_code = 130

    def __init__(self, message: str, deployment: Deployment) -> None:
        super().__init__(message)
        self.deployment = deployment


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def resource_names(endpoint_name: str, run_id: str) -> tuple[str, str]:
    """(endpoint config, model) names: unique per run, at most 63 characters."""
    suffix = run_id.rsplit("-", 1)[-1]
    base = endpoint_name[: 63 - len(suffix) - 5].rstrip("-")
    return f"{base}-cfg-{suffix}", f"{base}-mdl-{suffix}"


def _deploy_tags(spec: DeploySpec, run_id: str) -> list[dict[str, str]]:
    tags = {**spec.tags, CREATED_BY_TAG[0]: CREATED_BY_TAG[1], RUN_ID_TAG: run_id, ENDPOINT_TAG: spec.name}
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def _check_record_path(record_path: Path) -> None:
    if record_path.exists():
        previous = load_record(record_path)
        if previous.is_live:
            raise ConfigError(
                f"{record_path} records endpoint '{previous.endpoint_name}' that is not deleted yet; "
                f"run: loadgen endpoint delete --record {record_path}  (or pass another --record)"
            )


def _aws_seconds(description: Mapping[str, Any]) -> float | None:
    created, modified = description.get("CreationTime"), description.get("LastModifiedTime")
    if created is None or modified is None:
        return None
    return round((modified - created).total_seconds(), 1)


def logs_since_ms(dep: Deployment) -> int | None:
    """Where this deployment's log starts: the log group outlives an endpoint of the same name,
    so older starts must not be read. A minute before CreateEndpoint absorbs clock skew."""
    if dep.created_at is None:
        return None
    return int((datetime.fromisoformat(dep.created_at).timestamp() - 60) * 1000)


class _Deployer:
    """One deploy in progress. ``self.dep`` is always the latest record, also on disk."""

    def __init__(
        self, spec: DeploySpec, aws: AwsConfig, dep: Deployment, on_status: StatusCallback, cancel: threading.Event
    ) -> None:
        self.spec = spec
        self.aws = aws
        self.sagemaker = aws.sagemaker()
        self.dep = dep
        self.on_status = on_status
        self.cancel = cancel
        self.started_ns = time.perf_counter_ns()

    def say(self, status: str) -> None:
        self.on_status(status, (time.perf_counter_ns() - self.started_ns) / 1e9)

    def warn(self, text: str) -> None:
        self.say(f"warning: {text}")

    def create_all(self) -> int:
        """Create model, endpoint config, endpoint; returns when CreateEndpoint was sent."""
        dep, spec = self.dep, self.spec
        tags = _deploy_tags(spec, dep.run_id)
        self.say(f"creating model {dep.model_name}")
        with aws_call(f"create model '{dep.model_name}'", secrets=spec.secret_values()):
            self.sagemaker.create_model(
                ModelName=dep.model_name,
                PrimaryContainer={"Image": spec.image, "Environment": spec.container_environment()},
                ExecutionRoleArn=spec.role_arn,
                Tags=tags,
            )
        self.dep = self.dep.with_created(MODEL)

        self.say(f"creating endpoint config {dep.endpoint_config_name}")
        with aws_call(f"create endpoint config '{dep.endpoint_config_name}'"):
            self.sagemaker.create_endpoint_config(
                EndpointConfigName=dep.endpoint_config_name,
                ProductionVariants=[_variant(spec, dep.model_name)],
                Tags=tags,
                **metrics_config_argument(self.sagemaker, spec.metrics, self.warn),
            )
        self.dep = self.dep.with_created(ENDPOINT_CONFIG)

        self.say(f"creating endpoint {dep.endpoint_name}")
        self.dep = self.dep.saved(created_at=now_iso())
        create_ns = time.perf_counter_ns()
        with aws_call(f"create endpoint '{dep.endpoint_name}'"):
            self.sagemaker.create_endpoint(
                EndpointName=dep.endpoint_name, EndpointConfigName=dep.endpoint_config_name, Tags=tags
            )
        self.dep = self.dep.saved(created=(*self.dep.created, ENDPOINT), status="Creating")
        return create_ns

    def roll_back(self) -> None:
        """A create call was refused: delete what exists (best effort; the record keeps the names)."""
        created = self.dep.created
        if not created:
            self.dep = self.dep.saved(status=DELETED)
            return
        resources = Resources(
            endpoint=self.dep.endpoint_name if ENDPOINT in created else None,
            endpoint_configs=(self.dep.endpoint_config_name,) if ENDPOINT_CONFIG in created else (),
            models=(self.dep.model_name,),
        )
        try:
            teardown = delete_resources(resources, self.aws, on_status=self.on_status)
        except LoadgenError:
            return
        self.say("rolled back: deleted " + ", ".join(teardown.deleted))
        self.dep = self.dep.saved(status=DELETED, deleted_at=now_iso())

    def wait_in_service(self, create_ns: int, timeout_s: float, poll_s: float) -> dict[str, Any] | None:
        """Poll DescribeEndpoint until it leaves the in-progress statuses (or the endpoint vanishes)."""
        while True:
            description = describe_endpoint_or_none(self.sagemaker, self.dep.endpoint_name)
            since_create = (time.perf_counter_ns() - create_ns) / 1e9
            status = description["EndpointStatus"] if description else "Missing"
            if status != self.dep.status:
                self.dep = self.dep.saved(status=status)
            self.say(status)
            if status == "InService":
                self.dep = self.dep.saved(
                    seconds_to_in_service=round(since_create, 1), aws_seconds_to_in_service=_aws_seconds(description)
                )
            if status not in IN_PROGRESS or since_create > timeout_s:
                return description
            if self.cancel.wait(poll_s):
                message = f"deploy of endpoint '{self.dep.endpoint_name}' cancelled while {status}"
                raise DeployCancelled(message, self.dep)

    def collect_facts(self, wait_s: float, poll_s: float) -> None:
        """The vLLM startup facts from CloudWatch; log delivery lags a little, so retry briefly."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                facts = endpoint_facts(self.dep.endpoint_name, self.aws, start_ms=logs_since_ms(self.dep))
            except LoadgenError:  # no log group (the container never logged), or no logs permission
                facts = None
                break
            if facts.kv_cache_tokens is not None or time.monotonic() >= deadline:
                break
            if self.cancel.wait(poll_s):
                break
        self.dep = self.dep.saved(facts=facts.to_dict() if facts is not None else None)

    def failure(self, description: Mapping[str, Any] | None, timeout_s: float) -> DeployFailed:
        status = self.dep.status
        if description is None:
            reason = "the endpoint disappeared while it was being created (deleted by someone else?)"
        elif status in IN_PROGRESS:
            reason = f"still {status} after {timeout_s:.0f} s (it keeps billing until deleted)"
        else:
            reason = description.get("FailureReason") or f"status {status}"
        try:
            tail = tail_endpoint_log(self.dep.endpoint_name, self.aws, start_ms=logs_since_ms(self.dep))
        except LoadgenError as err:  # e.g. no permission to read logs: still report the failure
            tail = [f"(could not read the CloudWatch log: {err})"]
        self.dep = self.dep.saved(failure_reason=reason, log_tail=tuple(tail))
        return DeployFailed(
            f"endpoint '{self.dep.endpoint_name}' is not InService: {reason}; "
            f"delete it with: loadgen endpoint delete --record {self.dep.record_path}",
            self.dep,
        )


def _variant(spec: DeploySpec, model_name: str) -> dict[str, Any]:
    variant: dict[str, Any] = {
        "VariantName": VARIANT_NAME,
        "ModelName": model_name,
        "InstanceType": spec.instance_type,
        "InitialInstanceCount": spec.instance_count,
    }
    if spec.startup_timeout_s:
        variant["ContainerStartupHealthCheckTimeoutInSeconds"] = spec.startup_timeout_s
    if spec.inference_ami_version:
        variant["InferenceAmiVersion"] = spec.inference_ami_version
    return variant


def _refuse_existing(sagemaker: Any, name: str) -> None:
    existing = describe_endpoint_or_none(sagemaker, name)
    if existing is not None:
        raise ConfigError(
            f"endpoint '{name}' already exists ({existing['EndpointStatus']}); "
            f"delete it (loadgen endpoint delete {name}) or choose another --name"
        )


def deploy_endpoint(
    spec: DeploySpec,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    record_path: str | Path | None = None,
    poll_s: float = 5.0,
    wait_timeout_s: float = 3600.0,
    facts_wait_s: float = 30.0,
    on_status: StatusCallback | None = None,
    cancel: threading.Event | None = None,
    aws: AwsConfig | None = None,
) -> Deployment:
    """Create model, endpoint config and endpoint; wait for InService; return the record.

    ``on_status(status, elapsed_s)`` is called for each step and each poll.
    Raises :class:`DeployFailed` (endpoint Failed, or not InService within
    ``wait_timeout_s``; its ``.deployment`` holds FailureReason and the last log
    lines; the endpoint is left for inspection), :class:`DeployCancelled` when
    ``cancel`` is set, and ``LoadgenError`` for a refused create call (after
    deleting what was already created). On KeyboardInterrupt the record on disk
    still names everything that may exist: pass it to ``delete_deployment``. ``aws``:
    clients to use instead of new ones from ``region``/``endpoint_url``.
    """
    spec.validate()
    aws = aws or AwsConfig(region=region, endpoint_url=endpoint_url)
    path = Path(record_path) if record_path is not None else Path(f"{spec.name}.deployment.json")
    _check_record_path(path)
    run_id = new_run_id()
    config_name, model_name = resource_names(spec.name, run_id)
    dep = Deployment(
        endpoint_name=spec.name,
        endpoint_config_name=config_name,
        model_name=model_name,
        run_id=run_id,
        region=aws.resolved_region(),
        endpoint_url=endpoint_url,
        spec=spec.describe(),
        record_path=path,
    )
    deployer = _Deployer(spec, aws, dep, on_status or (lambda status, elapsed: None), cancel or threading.Event())
    _refuse_existing(deployer.sagemaker, spec.name)
    deployer.dep = dep.saved()  # the names, before anything exists
    try:
        create_ns = deployer.create_all()
    except LoadgenError:
        deployer.roll_back()
        raise
    description = deployer.wait_in_service(create_ns, wait_timeout_s, poll_s)
    if not deployer.dep.in_service:
        raise deployer.failure(description, wait_timeout_s)
    deployer.collect_facts(facts_wait_s, poll_s)
    return deployer.dep
