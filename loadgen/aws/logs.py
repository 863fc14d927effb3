"""Reading a SageMaker endpoint's CloudWatch log: the vLLM startup lines live there.

SageMaker writes each instance's container output to the log group
``/aws/sagemaker/Endpoints/{endpoint}``, stream ``{variant}/{instance-id}``.
The group appears only once the container has started; until then (or after a
failure before start) there is simply no group.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator

from botocore.exceptions import ClientError

from ..errors import AwsError
from ..vllm.facts import ServerFacts, parse_startup_log, strip_ansi
from .errors import aws_call, error_code
from .resources import describe_endpoint_or_none
from .session import AwsConfig


def endpoint_log_group(endpoint_name: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint_name}"


class LogGroupMissing(AwsError):
    """The endpoint has no CloudWatch log group (yet)."""


def iter_log_lines(
    logs_client: Any, group: str, *, start_ms: int | None = None, end_ms: int | None = None
) -> Iterator[str]:
    """Every event message of ``group`` (all streams, oldest first), one line each."""
    for _, line in iter_log_events(logs_client, group, start_ms=start_ms, end_ms=end_ms):
        yield line


def iter_log_events(
    logs_client: Any, group: str, *, start_ms: int | None = None, end_ms: int | None = None
) -> Iterator[tuple[float, str]]:
    """``(event time in epoch seconds, message)`` of every event of ``group``, oldest first."""
    kwargs: dict[str, Any] = {"logGroupName": group, "interleaved": True}
    if start_ms is not None:
        kwargs["startTime"] = start_ms
    if end_ms is not None:
        kwargs["endTime"] = end_ms
    pages = logs_client.get_paginator("filter_log_events").paginate(**kwargs)
    with aws_call(f"read CloudWatch log group {group}"):
        try:
            for page in pages:
                for event in page.get("events", []):
                    yield event.get("timestamp", 0) / 1000, event.get("message", "").rstrip("\r\n")
        except ClientError as err:
            if error_code(err) == "ResourceNotFoundException":
                raise LogGroupMissing(
                    f"no CloudWatch log group {group}: the endpoint has not logged yet, "
                    "or the name or region is wrong"
                ) from None
            raise


def endpoint_facts(
    endpoint_name: str, aws: AwsConfig, *, start_ms: int | None = None, end_ms: int | None = None
) -> ServerFacts:
    """Deployment facts (weights, load time, KV cache) from the endpoint's vLLM startup log."""
    lines = iter_log_lines(aws.logs(), endpoint_log_group(endpoint_name), start_ms=start_ms, end_ms=end_ms)
    return parse_startup_log(lines)


def tail_endpoint_log(endpoint_name: str, aws: AwsConfig, *, lines: int = 20, start_ms: int | None = None) -> list[str]:
    """The last ``lines`` log lines (ANSI stripped); empty when there is no log group yet."""
    try:
        last = deque(iter_log_lines(aws.logs(), endpoint_log_group(endpoint_name), start_ms=start_ms), maxlen=lines)
    except LogGroupMissing:
        return []
    return [strip_ansi(line) for line in last]


# vLLM logs its facts while starting: within the container startup health-check
# timeout (at most an hour) plus restarts. Reading no further than this keeps a
# long-lived endpoint's request and ping log lines out of the read.
STARTUP_WINDOW_S = 2 * 3600


def endpoint_stats_series(
    endpoint_name: str, *, region: str | None = None, endpoint_url: str | None = None,
    since_s: float | None = None,
) -> dict[str, Any]:
    """vLLM's periodic stats lines (running, waiting, KV usage, throughput) from the
    endpoint's log as a server series (:func:`loadgen.vllm.stats_log.stats_series`): the
    last ``since_s`` seconds, or the whole group."""
    import time

    from ..vllm.stats_log import stats_series

    aws = AwsConfig(region=region, endpoint_url=endpoint_url)
    start_ms = int((time.time() - since_s) * 1000) if since_s else None
    events = iter_log_events(aws.logs(), endpoint_log_group(endpoint_name), start_ms=start_ms)
    return {**stats_series(events), "endpoint": endpoint_name}


def endpoint_facts_now(
    endpoint_name: str, *, region: str | None = None, endpoint_url: str | None = None
) -> ServerFacts:
    """Facts of the endpoint's current deployment (its first two hours of log after CreationTime).

    The log group outlives an endpoint, so a re-created endpoint of the same name
    would otherwise show an older start. If the endpoint is gone, the whole group is read.
    """
    aws = AwsConfig(region=region, endpoint_url=endpoint_url)
    description = describe_endpoint_or_none(aws.sagemaker(), endpoint_name)
    start_ms = end_ms = None
    if description is not None and description.get("CreationTime") is not None:
        created_s = description["CreationTime"].timestamp()
        start_ms, end_ms = int((created_s - 60) * 1000), int((created_s + STARTUP_WINDOW_S) * 1000)
    return endpoint_facts(endpoint_name, aws, start_ms=start_ms, end_ms=end_ms)
