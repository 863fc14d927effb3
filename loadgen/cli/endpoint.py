"""``loadgen endpoint deploy|status|delete|list`` and ``loadgen facts``.

A thin layer over :mod:`loadgen.aws` and :mod:`loadgen.vllm.facts`. Progress goes to
stderr (one rewritten line on a terminal), results to stdout. Every
:class:`LoadgenError` becomes one ``Error: ...`` line and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Callable, TextIO

import click
import cloup

from ..aws import (
    DEFAULT_INSTANCE_TYPE,
    DeployFailed,
    Deployment,
    DeploySpec,
    delete_deployment,
    delete_endpoint_named,
    deploy_endpoint,
    endpoint_status,
    list_deployments,
    load_record,
    parse_env,
)
from ..aws.logs import endpoint_facts_now
from ..aws.metrics_config import PUBLISH_FREQUENCIES_S, EndpointMetricsConfig
from ..aws.record import DELETED
from ..aws.resources import Teardown
from ..errors import AwsError, ConfigError
from ..runconfig import default
from ..vllm.facts import ServerFacts, facts_from_log_file, parse_startup_log
from ..vllm.facts_table import format_facts_table
from .common import one_line_errors

AWS_OPTIONS = (
    click.option("--region", help="AWS region (default: AWS_REGION / your profile)."),
    click.option("--endpoint-url", metavar="URL", help="AWS API endpoint (VPC endpoint, or a local emulator)."),
)


def aws_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(AWS_OPTIONS):
        fn = option(fn)
    return fn


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class StatusLine:
    """Progress on stderr: one line rewritten in place on a terminal, one line per change otherwise."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.last: str | None = None

    def __call__(self, status: str, elapsed_s: float) -> None:
        text = f"{self.label}: {status} ({_duration(elapsed_s)})"
        if status.startswith("warning:"):  # its own line, never overwritten
            self.stream.write(("\r\x1b[K" if self.tty else "") + status + "\n")
        elif self.tty:
            self.stream.write("\r\x1b[K" + text)
        elif status != self.last:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.last = status

    def done(self) -> None:
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()
        self.last = None


def _say(text: str) -> None:
    click.echo(text, err=True)


# ---------------------------------------------------------------------------
# option parsing


def parse_tags(items: tuple[str, ...]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in items:
        for pair in filter(None, (part.strip() for part in item.split(","))):
            key, has_value, value = pair.partition("=")
            if not key or not has_value:
                raise ConfigError(f"--tags {pair!r}: expected KEY=VALUE[,KEY=VALUE...]")
            if key.lower().startswith("aws:"):
                raise ConfigError(f"--tags {key!r}: the aws: prefix is reserved by AWS")
            tags[key] = value
    return tags


# ---------------------------------------------------------------------------
# endpoint group


@click.group()
def endpoint() -> None:
    """Deploy, inspect and delete SageMaker endpoints (model -> endpoint config -> endpoint)."""


def _print_plan(spec: DeploySpec, region: str | None, record: Path) -> None:
    where = f" in {region}" if region else ""
    _say(f"deploying endpoint {spec.name}{where}: {spec.instance_type} x{spec.instance_count}")
    _say(f"  image   {spec.image}")
    if spec.model_id:
        _say(f"  model   {spec.model_id}")
    shown = spec.describe()["environment"]
    if shown:
        _say("  env     " + ", ".join(f"{key}={value}" for key, value in shown.items()))
    _say(f"  record  {record}")


def _print_deployment(dep: Deployment, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(dep.to_json(), indent=2))
        return
    line = f"endpoint {dep.endpoint_name}: InService after {_duration(dep.seconds_to_in_service or 0)}"
    line += f" ({dep.seconds_to_in_service} s by loadgen's clock"
    if dep.aws_seconds_to_in_service is not None:
        line += f"; {dep.aws_seconds_to_in_service} s by SageMaker's CreationTime/LastModifiedTime"
    click.echo(line + ")")
    click.echo(f"record: {dep.record_path}")
    if dep.facts:
        click.echo(format_facts_table(ServerFacts(**dep.facts)))


def _print_teardown(teardown: Teardown) -> None:
    for item in teardown.deleted:
        click.echo(f"deleted {item}")
    for item in teardown.already_gone:
        click.echo(f"already gone: {item}")


def _offer_teardown(record: Path, yes: bool, why: str, poll_s: float) -> bool:
    """After Ctrl-C or a failure: ask (or with --yes, proceed) to delete what the record names.

    True when everything is deleted.
    """
    dep = load_record(record)
    if dep.status == DELETED:
        return True
    names = f"endpoint {dep.endpoint_name}, endpoint config {dep.endpoint_config_name}, model {dep.model_name}"
    later = f"loadgen endpoint delete --record {record}"
    try:
        proceed = yes or click.confirm(f"{why}: delete what was created ({names})?", default=True, err=True)
    except click.exceptions.Abort:  # no answer (stdin closed, or Ctrl-C at the prompt)
        proceed = False
    if not proceed:
        _say(f"left in place; delete it later with: {later}")
        return False
    status = StatusLine(f"deleting {dep.endpoint_name}")
    try:
        teardown = delete_deployment(dep, poll_s=poll_s, on_status=status)
    except KeyboardInterrupt:
        status.done()
        _say(f"teardown interrupted; finish it with: {later}")
        return False
    status.done()
    _print_teardown(teardown)
    return True


@endpoint.command(cls=cloup.Command)
@cloup.option_group(
    "Endpoint",
    click.option("--name", required=True, help="Endpoint name (model and config names are derived from it)."),
    click.option("--instance-type", default=DEFAULT_INSTANCE_TYPE, help="SageMaker instance type."),
    click.option("--instance-count", type=int, default=1, metavar="INSTANCES",
                 help="Instances behind the endpoint."),
    click.option("--role", required=True, envvar="LOADGEN_SAGEMAKER_ROLE", metavar="ARN",
                 help="SageMaker execution role ARN (or LOADGEN_SAGEMAKER_ROLE)."),
    click.option("--tags", "tag_items", multiple=True, metavar="KEY=VALUE[,...]", help="Extra tags. Repeatable."),
)
@cloup.option_group(
    "Container",
    click.option("--image", required=True, metavar="URI", help="Container image, e.g. the AWS vLLM DLC in your region."),
    click.option("--model-id", help="Model to serve; sets SM_VLLM_MODEL."),
    click.option("--env", "env_items", multiple=True, metavar="KEY[=VALUE]",
                 help="Container environment (e.g. SM_VLLM_MAX_MODEL_LEN=4096); KEY alone copies your "
                      "environment's value. HF_TOKEN is copied from your environment when set. Repeatable."),
    click.option("--startup-timeout", type=int, metavar="S", show_default="SageMaker's",
                 help="ContainerStartupHealthCheckTimeoutInSeconds (big models need more than the default)."),
    click.option("--inference-ami-version", help="e.g. al2-ami-sagemaker-inference-gpu-3-1 (driver/CUDA version)."),
)
@cloup.option_group(
    "CloudWatch metrics (the endpoint config's MetricsConfig)",
    click.option("--metrics-frequency", type=click.Choice([str(s) for s in PUBLISH_FREQUENCIES_S]),
                 default=str(default(EndpointMetricsConfig, "frequency_s")), metavar="S",
                 help="Seconds between the endpoint's CloudWatch data points (enhanced metrics on; "
                      "10, 30, 60, 120, 180, 240 or 300)."),
    click.option("--detailed-observability/--no-detailed-observability",
                 default=default(EndpointMetricsConfig, "detailed_observability"),
                 help="Also publish the container's own /metrics (vLLM's) to CloudWatch (more cost)."),
)
@cloup.option_group(
    "Waiting",
    click.option("--wait-timeout", type=float, default=3600.0, metavar="S",
                 help="Give up waiting for InService after this many seconds."),
    click.option("--poll-interval", type=float, default=5.0, metavar="S",
                 help="Seconds between DescribeEndpoint polls."),
    click.option("--facts-wait", type=float, default=30.0, metavar="S",
                 help="After InService, wait up to this many seconds for vLLM's KV-cache lines in CloudWatch "
                      "(0: don't wait)."),
    click.option("--yes", is_flag=True, help="On Ctrl-C or failure, delete what was created without asking."),
)
@cloup.option_group(
    "Output and AWS",
    click.option("--record", type=click.Path(dir_okay=False, path_type=Path),
                 show_default="./NAME.deployment.json", help="Deployment record JSON."),
    click.option("--json", "as_json", is_flag=True, help="Print the deployment record as JSON."),
    *AWS_OPTIONS,
)
@one_line_errors
def deploy(name: str, image: str, model_id: str | None, env_items: tuple[str, ...], instance_type: str,
           instance_count: int, role: str, startup_timeout: int | None, inference_ami_version: str | None,
           tag_items: tuple[str, ...], metrics_frequency: str, detailed_observability: bool,
           wait_timeout: float, poll_interval: float, facts_wait: float, record: Path | None, yes: bool,
           as_json: bool, region: str | None, endpoint_url: str | None) -> None:
    """Create model, endpoint config and endpoint; wait for InService; record the time and facts."""
    spec = DeploySpec(
        name=name, image=image, role_arn=role, model_id=model_id, environment=parse_env(env_items),
        instance_type=instance_type, instance_count=instance_count, startup_timeout_s=startup_timeout,
        inference_ami_version=inference_ami_version, tags=parse_tags(tag_items),
        metrics=EndpointMetricsConfig(int(metrics_frequency), detailed_observability),
    )
    spec.validate()
    record = record or Path(f"{name}.deployment.json")
    _print_plan(spec, region, record)
    status = StatusLine(f"endpoint {name}")
    try:
        dep = deploy_endpoint(spec, region=region, endpoint_url=endpoint_url, record_path=record,
                              poll_s=poll_interval, wait_timeout_s=wait_timeout, facts_wait_s=facts_wait,
                              on_status=status)
    except KeyboardInterrupt:
        status.done()
        if record.exists():
            _offer_teardown(record, yes, "interrupted", poll_interval)
        raise click.exceptions.Exit(130)
    except DeployFailed as err:
        status.done()
        for line in err.deployment.log_tail:
            _say(f"  | {line}")
        if _offer_teardown(record, yes, f"endpoint {name} failed", poll_interval):
            raise AwsError(f"endpoint '{name}' was not InService: {err.deployment.failure_reason} (deleted)") from None
        raise
    status.done()
    _print_deployment(dep, as_json)


@endpoint.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@aws_options
@one_line_errors
def status(name: str, as_json: bool, region: str | None, endpoint_url: str | None) -> None:
    """Show one endpoint's status (and FailureReason)."""
    info = endpoint_status(name, region=region, endpoint_url=endpoint_url)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    for key, value in info.items():
        if value is not None:
            click.echo(f"{key:<20} {value}")


@endpoint.command()
@click.argument("name", required=False)
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path),
              help="Delete what this deployment record names.")
@click.option("--poll-interval", type=float, default=5.0, metavar="S",
              help="Seconds between DescribeEndpoint polls.")
@click.option("--wait-timeout", type=float, default=1800.0, metavar="S",
              help="Give up waiting for the deletion after this many seconds.")
@aws_options
@one_line_errors
def delete(name: str | None, record: Path | None, poll_interval: float, wait_timeout: float,
           region: str | None, endpoint_url: str | None) -> None:
    """Delete an endpoint, its config and its model; waits until the endpoint is really gone.

    Idempotent: what is already gone is reported, not an error.
    """
    if (name is None) == (record is None):
        raise ConfigError("pass either an endpoint NAME or --record FILE")
    label = name or str(record)
    status_line = StatusLine(f"deleting {label}")
    if record is not None:
        teardown = delete_deployment(record, region=region, endpoint_url=endpoint_url, poll_s=poll_interval,
                                     wait_timeout_s=wait_timeout, on_status=status_line)
    else:
        teardown = delete_endpoint_named(name, region=region, endpoint_url=endpoint_url, poll_s=poll_interval,
                                         wait_timeout_s=wait_timeout, on_status=status_line)
    status_line.done()
    _print_teardown(teardown)
    if not teardown.deleted:
        click.echo("nothing to delete: everything was already gone")


@endpoint.command(name="list")
@click.option("--all", "include_orphans", is_flag=True, help="Also list leftover models and endpoint configs.")
@click.option("--json", "as_json", is_flag=True)
@aws_options
@one_line_errors
def list_(include_orphans: bool, as_json: bool, region: str | None, endpoint_url: str | None) -> None:
    """List what loadgen created (found by the loadgen:created-by tag)."""
    rows = list_deployments(region=region, endpoint_url=endpoint_url, include_orphans=include_orphans)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no endpoints created by loadgen")
        return
    click.echo(f"{'KIND':<16} {'NAME':<40} {'STATUS':<12} {'CREATED':<26} RUN ID")
    for row in rows:
        click.echo(f"{row['kind']:<16} {row['name']:<40} {row['status'] or '-':<12} "
                   f"{row['created'] or '-':<26} {row['run_id'] or '-'}")


# ---------------------------------------------------------------------------
# facts


def _facts_from_file(path: str) -> ServerFacts:
    if path == "-":
        return parse_startup_log(sys.stdin)
    return facts_from_log_file(path, "--log")


@click.command()
@click.option("--log", "log_file", metavar="FILE", help="A vLLM server's log file ('-' for stdin).")
@click.option("--endpoint", "endpoint_name", metavar="NAME", help="A SageMaker endpoint: read its CloudWatch log.")
@click.option("--url", metavar="URL", help="A running vLLM server: read its /metrics (KV-cache facts only).")
@click.option("--stats", is_flag=True, help="Instead: vLLM's periodic stats lines (running, waiting, KV "
              "usage, tok/s) as a server series, from --log or --endpoint.")
@click.option("--since", type=click.FloatRange(min=1), metavar="S", help="--stats --endpoint: only the "
              "last S seconds of the log.", show_default="the whole log")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@aws_options
@one_line_errors
def facts(log_file: str | None, endpoint_name: str | None, url: str | None, stats: bool, since: float | None,
          as_json: bool, region: str | None, endpoint_url: str | None) -> None:
    """Deployment facts from vLLM: weight loading time, model memory, KV-cache size, max concurrency."""
    sources = [s for s in (log_file, endpoint_name, url) if s is not None]
    if len(sources) != 1:
        raise ConfigError("pass exactly one of --log FILE, --endpoint NAME, --url URL")
    if stats or since is not None:
        from .stats import print_stats

        print_stats(log_file, endpoint_name, url, since, as_json, region, endpoint_url)
        return
    if log_file is not None:
        found = _facts_from_file(log_file)
    elif endpoint_name is not None:
        found = endpoint_facts_now(endpoint_name, region=region, endpoint_url=endpoint_url)
    else:
        from ..vllm.server_metrics import fetch_server_facts  # aiohttp: only when used

        found = ServerFacts(**asyncio.run(fetch_server_facts(url)))
    if found.is_empty():
        _say("no vLLM startup facts found (is this a vLLM log, and did the server get past loading?)")
    if as_json:
        click.echo(json.dumps(found.to_dict()))
    else:
        click.echo(format_facts_table(found))
