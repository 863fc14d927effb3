"""Endpoint tools: ``list_endpoints``, ``endpoint_status``, ``deploy_endpoint``,
``delete_endpoint``, ``deployment_facts``.

The control plane is blocking boto3 (:mod:`loadgen.aws`): each call runs in a thread
while the tool reports its status lines as progress. ``deploy_endpoint`` and
``delete_endpoint`` are refused unless the server was started with ``--allow-deploy``.
A deploy that is cancelled, times out or fails deletes what it created (unless told
not to on failure), so an interrupted call does not leave an endpoint billing.
"""

import asyncio
import os
import threading
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from .. import aws as control
from ..aws import (
    DEFAULT_INSTANCE_TYPE,
    DeployCancelled,
    DeployFailed,
    DeploySpec,
    parse_env,
)
from ..aws.logs import endpoint_facts_now
from ..cloudwatch_settings import PUBLISH_FREQUENCIES_S, EndpointMetricsConfig
from ..errors import AwsError, ConfigError
from ..runconfig import default
from ..vllm.facts import ServerFacts, parse_startup_log
from ..vllm.facts_table import format_facts_table
from ..vllm.server_metrics import fetch_server_facts
from .arguments import PATH_CHARS
from .confine import LOG_MAX_BYTES, capped_lines, readable_file
from .options import ServerOptions
from .toolkit import AWS_S, CLOUD_CHANGE, READ_ONLY, bounded, refuse_without_deploy

MAX_DEPLOY_WAIT_S = 3600.0
Region = Annotated[str | None, Field(description="AWS region (default: the server's --region, "
                                     "else AWS_REGION / the profile's).")]
EndpointUrl = Annotated[str | None, Field(description="AWS API endpoint override (a VPC "
                                          "endpoint or a local emulator; default: the "
                                          "server's --aws-endpoint-url).")]


class EndpointRow(BaseModel):
    kind: str = Field(description="endpoint, or endpoint_config / model (leftovers)")
    name: str
    status: str | None
    created: str | None
    run_id: str | None
    endpoint: str | None = None


class EndpointList(BaseModel):
    endpoints: list[EndpointRow] = Field(description="what loadgen created (by its tag)")


class EndpointStatus(BaseModel):
    name: str
    status: str
    failure_reason: str | None
    endpoint_config: str | None
    instance_count: int | None
    created: str | None
    last_modified: str | None
    created_by_loadgen: bool
    run_id: str | None


class Deployed(BaseModel):
    endpoint_name: str
    status: str
    target: str = Field(description="the start_run target for this endpoint")
    seconds_to_in_service: float | None = Field(description="create to InService, loadgen's "
                                                "clock")
    aws_seconds_to_in_service: float | None = Field(description="the same by SageMaker's "
                                                    "CreationTime/LastModifiedTime")
    record: str = Field(description="the deployment record (delete_endpoint uses it)")
    facts: dict[str, Any] | None = Field(description="vLLM startup facts from CloudWatch")
    deployment: dict[str, Any] = Field(description="the whole record (secrets masked)")


class Deleted(BaseModel):
    deleted: list[str]
    already_gone: list[str]
    seconds: float


class Facts(BaseModel):
    source: str
    found: bool = Field(description="false when the source held no vLLM startup facts")
    facts: dict[str, Any]
    table: str


async def _in_thread(work: Callable[[Callable[[str, float], None]], Any],
                     ctx: Context | None) -> Any:
    """``work(on_status)`` in a thread; each new status line goes to the client as progress."""
    lines: list[str] = []  # appended by the thread, read here (list.append is atomic)

    def on_status(text: str, elapsed_s: float) -> None:
        line = f"{text} ({elapsed_s:.0f} s)"
        if not lines or lines[-1] != line:
            lines.append(line)

    job = asyncio.ensure_future(asyncio.to_thread(work, on_status))
    try:
        sent = 0
        while not job.done():
            await asyncio.wait({job}, timeout=1.0)
            while ctx is not None and sent < len(lines):
                sent += 1
                await ctx.report_progress(sent, None, lines[sent - 1])
        return job.result()
    finally:
        job.cancel()  # when we were cancelled: stop waiting (the thread itself runs on)


def _deploy_limit(kwargs: dict) -> float:
    return (kwargs.get("wait_timeout_s") or 0) + (kwargs.get("facts_wait_s") or 0) + 2 * AWS_S


def register(server: MCPServer, options: ServerOptions) -> None:
    """Add the endpoint tools to ``server``."""

    def where_of(region: str | None, endpoint_url: str | None) -> dict:
        return {"region": region or options.region,
                "endpoint_url": endpoint_url or options.aws_endpoint_url}

    def record_path(name: str) -> Path:
        return options.deployments_dir / f"{name}.deployment.json"

    @server.tool(annotations=READ_ONLY)
    @bounded(AWS_S)
    async def list_endpoints(
        include_orphans: Annotated[bool, Field(description="Also list leftover models and "
                                   "endpoint configs whose endpoint is gone.")] = False,
        region: Region = None, endpoint_url: EndpointUrl = None,
    ) -> EndpointList:
        """The SageMaker endpoints loadgen created (found by its loadgen:created-by tag)."""
        rows = await asyncio.to_thread(control.list_deployments, include_orphans=include_orphans,
                                       **where_of(region, endpoint_url))
        return EndpointList(endpoints=[EndpointRow(**row) for row in rows])

    @server.tool(annotations=READ_ONLY)
    @bounded(AWS_S)
    async def endpoint_status(
        name: Annotated[str, Field(description="SageMaker endpoint name.")],
        region: Region = None, endpoint_url: EndpointUrl = None,
    ) -> EndpointStatus:
        """One endpoint's status (Creating, InService, Failed, ...) and FailureReason."""
        info = await asyncio.to_thread(control.endpoint_status, name,
                                       **where_of(region, endpoint_url))
        return EndpointStatus(**info)

    @server.tool(annotations=CLOUD_CHANGE)
    @bounded(_deploy_limit)
    async def deploy_endpoint(
        name: Annotated[str, Field(description="Endpoint name (model and config names are "
                                   "derived from it).")],
        image: Annotated[str, Field(description="Container image URI, e.g. the AWS vLLM DLC "
                                    "in your region.")],
        ctx: Context,
        role: Annotated[str | None, Field(description="SageMaker execution role ARN (default: "
                        "the server's LOADGEN_SAGEMAKER_ROLE).")] = None,
        model_id: Annotated[str | None, Field(description="Model to serve (sets "
                            "SM_VLLM_MODEL).")] = None,
        env: Annotated[list[str] | None, Field(description="Container environment as "
                       "KEY=VALUE; KEY alone copies the server's value. HF_TOKEN is copied "
                       "from the server's environment when set.")] = None,
        instance_type: Annotated[str, Field(description="Instance type.")]
        = DEFAULT_INSTANCE_TYPE,
        instance_count: Annotated[int, Field(ge=1, description="Instances behind the "
                                  "endpoint.")] = 1,
        startup_timeout_s: Annotated[int | None, Field(ge=1, description="Container startup "
                                     "health check timeout (big models need more).")] = None,
        inference_ami_version: Annotated[str | None, Field(description="e.g. "
                                         "al2-ami-sagemaker-inference-gpu-3-1.")] = None,
        tags: Annotated[dict[str, str] | None, Field(description="Extra tags.")] = None,
        metrics_frequency_s: Annotated[Literal[PUBLISH_FREQUENCIES_S], Field(  # type: ignore[valid-type]
            description="Seconds between the endpoint's CloudWatch data points (enhanced "
                        "metrics).")] = default(EndpointMetricsConfig, "frequency_s"),
        detailed_observability: Annotated[bool, Field(description="Also publish the "
                                          "container's own /metrics to CloudWatch (more "
                                          "cost).")]
        = default(EndpointMetricsConfig, "detailed_observability"),
        wait_timeout_s: Annotated[float, Field(gt=0, le=MAX_DEPLOY_WAIT_S, description="Give "
                                  "up waiting for InService after this long.")] = 1800.0,
        poll_interval_s: Annotated[float, Field(gt=0, le=60, description="Seconds between "
                                   "status polls.")] = 5.0,
        facts_wait_s: Annotated[float, Field(ge=0, le=300, description="After InService, wait "
                                "this long for vLLM's facts in CloudWatch.")] = 30.0,
        delete_on_failure: Annotated[bool, Field(description="Delete what was created when "
                                     "the endpoint does not reach InService.")] = True,
        region: Region = None, endpoint_url: EndpointUrl = None,
    ) -> Deployed:
        """Deploy a SageMaker endpoint (model -> endpoint config -> endpoint), wait until
        InService, and record the time it took and vLLM's startup facts. Needs a server
        started with --allow-deploy. Sends the status as progress while it waits."""
        refuse_without_deploy(options.allow_deploy, "deploy_endpoint")
        role = role or _server_role()
        spec = DeploySpec(name=name, image=image, role_arn=role, model_id=model_id,
                          environment=parse_env(tuple(env or ()), _env_to_copy(options, env)),
                          instance_type=instance_type,
                          instance_count=instance_count, startup_timeout_s=startup_timeout_s,
                          inference_ami_version=inference_ami_version, tags=dict(tags or {}),
                          metrics=EndpointMetricsConfig(metrics_frequency_s, detailed_observability))
        spec.validate()
        cancel = threading.Event()
        where = where_of(region, endpoint_url)

        def work(on_status: Callable[[str, float], None]) -> Any:
            def teardown(dep: Any) -> None:
                control.delete_deployment(dep, poll_s=poll_interval_s, on_status=on_status)

            try:
                return control.deploy_endpoint(
                    spec, record_path=record_path(name), poll_s=poll_interval_s,
                    wait_timeout_s=wait_timeout_s, facts_wait_s=facts_wait_s,
                    on_status=on_status, cancel=cancel, **where)
            except DeployCancelled as err:  # the call was cancelled or timed out: clean up
                teardown(err.deployment)
                raise
            except DeployFailed as err:
                if not delete_on_failure:
                    raise
                teardown(err.deployment)
                raise AwsError(f"endpoint '{name}' did not reach InService: "
                               f"{err.deployment.failure_reason} (deleted what was "
                               "created)") from None

        try:
            dep = await _in_thread(work, ctx)
        except BaseException:
            cancel.set()  # the thread stops at its next poll and deletes what it made
            raise
        return Deployed(endpoint_name=dep.endpoint_name, status=dep.status,
                        target=f"sagemaker://{dep.endpoint_name}",
                        seconds_to_in_service=dep.seconds_to_in_service,
                        aws_seconds_to_in_service=dep.aws_seconds_to_in_service,
                        record=str(dep.record_path), facts=dep.facts, deployment=dep.to_json())

    @server.tool(annotations=CLOUD_CHANGE)
    @bounded(lambda kwargs: (kwargs.get("wait_timeout_s") or 0) + AWS_S)
    async def delete_endpoint(
        name: Annotated[str, Field(description="Endpoint name.")],
        ctx: Context,
        wait_timeout_s: Annotated[float, Field(gt=0, le=MAX_DEPLOY_WAIT_S, description="Give "
                                  "up waiting for the endpoint to be gone after this long.")]
        = 1800.0,
        poll_interval_s: Annotated[float, Field(gt=0, le=60, description="Seconds between "
                                   "status polls.")] = 5.0,
        region: Region = None, endpoint_url: EndpointUrl = None,
    ) -> Deleted:
        """Delete an endpoint, its config and its model, and wait until the endpoint is gone.
        Uses this server's deployment record when there is one. Idempotent: what is already
        gone is reported, not an error. Needs a server started with --allow-deploy."""
        refuse_without_deploy(options.allow_deploy, "delete_endpoint")
        path = record_path(name)
        where = where_of(region, endpoint_url)
        use_record = path.exists() and control.load_record(path).is_live

        def work(on_status: Callable[[str, float], None]) -> Any:
            if use_record:
                return control.delete_deployment(path, poll_s=poll_interval_s,
                                         wait_timeout_s=wait_timeout_s, on_status=on_status,
                                         **where)
            return control.delete_endpoint_named(name, poll_s=poll_interval_s,
                                         wait_timeout_s=wait_timeout_s, on_status=on_status,
                                         **where)

        teardown = await _in_thread(work, ctx)
        return Deleted(deleted=list(teardown.deleted), already_gone=list(teardown.already_gone),
                       seconds=round(teardown.seconds, 1))

    @server.tool(annotations=READ_ONLY)
    @bounded(AWS_S)
    async def deployment_facts(
        log_file: Annotated[str | None, Field(max_length=PATH_CHARS, description="A vLLM "
                            "server's log file.")] = None,
        endpoint: Annotated[str | None, Field(description="A SageMaker endpoint: read its "
                            "CloudWatch log.")] = None,
        url: Annotated[str | None, Field(description="A running vLLM server: read its /metrics "
                       "(KV-cache facts only).")] = None,
        region: Region = None, endpoint_url: EndpointUrl = None,
    ) -> Facts:
        """vLLM deployment facts: weight loading time, model memory, KV-cache size, maximum
        concurrency. Give exactly one of log_file, endpoint, url."""
        given = [(k, v) for k, v in (("log_file", log_file), ("endpoint", endpoint),
                                     ("url", url)) if v is not None]
        if len(given) != 1:
            raise ConfigError("give exactly one of log_file, endpoint, url")
        source, value = given[0]
        if source == "log_file":
            path = readable_file(options, value, "log_file", LOG_MAX_BYTES)
            found = await asyncio.to_thread(_facts_from_log, path)
        elif source == "endpoint":
            found = await asyncio.to_thread(endpoint_facts_now, value,
                                            **where_of(region, endpoint_url))
        else:
            found = ServerFacts(**await fetch_server_facts(value))
        return Facts(source=f"{source} {value}", found=not found.is_empty(),
                     facts=found.to_dict(), table=format_facts_table(found))


def _env_to_copy(options: ServerOptions, items: list[str] | None) -> dict[str, str]:
    """The server variables a deploy's ``env`` may copy by name (``KEY`` alone): those
    allowed with --allow-env, and HF_TOKEN (copied anyway, see :func:`aws.parse_env`).
    Naming another is refused: the client can't pick the server's variables."""
    names = (*options.allow_env, "HF_TOKEN")
    for item in items or ():
        if "=" not in item and item not in names:
            raise ConfigError(f"env {item}: a deploy copies only the server variables allowed "
                              f"with --allow-env (and HF_TOKEN); pass {item}=VALUE, or "
                              f"restart the server with --allow-env {item}")
    return {name: os.environ[name] for name in names if name in os.environ}


def _facts_from_log(path: Path) -> ServerFacts:
    """vLLM facts from a log file, read as a stream of at most the log size cap."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_startup_log(capped_lines(handle, LOG_MAX_BYTES))


def _server_role() -> str:
    role = os.environ.get("LOADGEN_SAGEMAKER_ROLE")
    if not role:
        raise ConfigError("give role (a SageMaker execution role ARN), or start the server "
                          "with LOADGEN_SAGEMAKER_ROLE set")
    return role
