"""SageMaker resources by name: describe, tags, and idempotent deletion.

Deleting is idempotent: a resource that is already gone counts as done.
SageMaker refuses DeleteEndpoint while the endpoint is still Creating/Updating,
so we wait for that to end first; after DeleteEndpoint we poll until
DescribeEndpoint says it is gone, so "deleted" means nothing bills any more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from botocore.exceptions import ClientError

from ..errors import AwsError
from .errors import aws_call, is_not_found
from .session import AwsConfig

CREATED_BY_TAG = ("loadgen:created-by", "loadgen")
RUN_ID_TAG = "loadgen:run-id"
ENDPOINT_TAG = "loadgen:endpoint"

# Statuses that end a wait for InService; anything else is still in progress.
IN_PROGRESS = {"Creating", "Updating", "SystemUpdating", "RollingBack"}

StatusCallback = Callable[[str, float], None]  # (status or phase, seconds since deploy start)


def describe_endpoint_or_none(sagemaker: Any, name: str) -> dict[str, Any] | None:
    with aws_call(f"describe endpoint '{name}'"):
        try:
            return sagemaker.describe_endpoint(EndpointName=name)
        except ClientError as err:
            if is_not_found(err):
                return None
            raise


def resource_tags(sagemaker: Any, arn: str) -> dict[str, str]:
    with aws_call(f"list tags of {arn}"):
        pages = sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn)
        return {tag["Key"]: tag["Value"] for page in pages for tag in page.get("Tags", [])}


# What each kind's List* call returns: (list key, name key, ARN key).
_LISTED = {
    "endpoint": ("Endpoints", "EndpointName", "EndpointArn"),
    "endpoint_config": ("EndpointConfigs", "EndpointConfigName", "EndpointConfigArn"),
    "model": ("Models", "ModelName", "ModelArn"),
}
LOADGEN_TAGS = dict([CREATED_BY_TAG])  # on everything loadgen creates


def tagged(sagemaker: Any, kind: str, wanted: Mapping[str, str], *, name_prefix: str = ""
           ) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """``(name, listed item, tags)`` of every ``kind`` (endpoint, endpoint_config, model)
    whose name starts with ``name_prefix`` and whose tags include all of ``wanted``."""
    list_key, name_key, arn_key = _LISTED[kind]
    filters = {"NameContains": name_prefix} if name_prefix else {}
    with aws_call(f"list {kind}s"):
        pages = sagemaker.get_paginator(f"list_{kind}s").paginate(**filters)
        items = [item for page in pages for item in page.get(list_key, [])]
    found = []
    for item in items:
        if item[name_key].startswith(name_prefix):
            tags = resource_tags(sagemaker, item[arn_key])
            if wanted.items() <= tags.items():
                found.append((item[name_key], item, tags))
    return found


@dataclass(frozen=True)
class Resources:
    endpoint: str | None
    endpoint_configs: tuple[str, ...]
    models: tuple[str, ...]


@dataclass(frozen=True)
class Teardown:
    deleted: tuple[str, ...]  # e.g. "endpoint x", "model y"
    already_gone: tuple[str, ...]
    seconds: float


class _Clock:
    def __init__(self, on_status: StatusCallback | None) -> None:
        self.start = time.monotonic()
        self.on_status = on_status or (lambda status, elapsed: None)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, status: str) -> None:
        self.on_status(status, self.elapsed())


def _delete(call: Callable[[], Any], doing: str) -> bool:
    """Run one Delete* call; False when the resource was already gone."""
    with aws_call(doing):
        try:
            call()
        except ClientError as err:
            if is_not_found(err):
                return False
            raise
    return True


def _wait_while(
    sagemaker: Any, name: str, statuses: set[str], clock: _Clock, poll_s: float, timeout_s: float
) -> dict[str, Any] | None:
    """Poll until the endpoint's status is not in ``statuses``; None once it no longer exists."""
    while True:
        description = describe_endpoint_or_none(sagemaker, name)
        if description is None or description["EndpointStatus"] not in statuses:
            return description
        status = description["EndpointStatus"]
        clock.say(f"endpoint {name}: {status}")
        if clock.elapsed() > timeout_s:
            raise AwsError(
                f"endpoint '{name}' still {status} after {timeout_s:.0f} s; run the delete again later "
                "(or check the SageMaker console)"
            )
        time.sleep(poll_s)


def _delete_endpoint(sagemaker: Any, name: str, clock: _Clock, poll_s: float, timeout_s: float) -> bool:
    description = _wait_while(sagemaker, name, IN_PROGRESS, clock, poll_s, timeout_s)
    if description is None:
        return False
    if description["EndpointStatus"] != "Deleting":
        clock.say(f"deleting endpoint {name}")
        if not _delete(lambda: sagemaker.delete_endpoint(EndpointName=name), f"delete endpoint '{name}'"):
            return False
    gone = _wait_while(sagemaker, name, {"Deleting"}, clock, poll_s, timeout_s)
    if gone is not None:
        reason = gone.get("FailureReason") or gone["EndpointStatus"]
        raise AwsError(f"endpoint '{name}' was not deleted: {reason}; retry loadgen endpoint delete {name}")
    clock.say(f"endpoint {name} is gone")
    return True


def delete_resources(
    resources: Resources,
    aws: AwsConfig,
    *,
    poll_s: float = 5.0,
    wait_timeout_s: float = 1800.0,
    on_status: StatusCallback | None = None,
) -> Teardown:
    sagemaker = aws.sagemaker()
    clock = _Clock(on_status)
    deleted: list[str] = []
    gone: list[str] = []
    if resources.endpoint:
        done = _delete_endpoint(sagemaker, resources.endpoint, clock, poll_s, wait_timeout_s)
        (deleted if done else gone).append(f"endpoint {resources.endpoint}")
    for config in resources.endpoint_configs:
        done = _delete(
            lambda: sagemaker.delete_endpoint_config(EndpointConfigName=config), f"delete endpoint config '{config}'"
        )
        (deleted if done else gone).append(f"endpoint config {config}")
    for model in resources.models:
        done = _delete(lambda: sagemaker.delete_model(ModelName=model), f"delete model '{model}'")
        (deleted if done else gone).append(f"model {model}")
    return Teardown(deleted=tuple(deleted), already_gone=tuple(gone), seconds=round(clock.elapsed(), 1))
