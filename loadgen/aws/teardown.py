"""Delete what a deployment made: from its record, or from an endpoint name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from .errors import aws_call, is_not_found
from .record import DELETED, Deployment, load_record, utc_now_iso
from .resources import (
    CREATED_BY_TAG,
    ENDPOINT_TAG,
    Resources,
    StatusCallback,
    Teardown,
    delete_resources,
    describe_endpoint_or_none,
    resource_tags,
)
from .session import AwsConfig


def delete_deployment(
    deployment: Deployment | str | Path,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    poll_s: float = 5.0,
    wait_timeout_s: float = 1800.0,
    on_status: StatusCallback | None = None,
) -> Teardown:
    """Delete everything a deployment record names (whether or not it was created)."""
    dep = deployment if isinstance(deployment, Deployment) else load_record(deployment)
    aws = AwsConfig(region=region or dep.region, endpoint_url=endpoint_url or dep.endpoint_url)
    resources = Resources(dep.endpoint_name, (dep.endpoint_config_name,), (dep.model_name,))
    result = delete_resources(resources, aws, poll_s=poll_s, wait_timeout_s=wait_timeout_s, on_status=on_status)
    if dep.record_path is not None:
        dep.saved(status=DELETED, deleted_at=utc_now_iso())
    return result


# ---------------------------------------------------------------------------
# Delete by endpoint name (no record at hand)


def _orphans_of(sagemaker: Any, endpoint_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Configs/models loadgen created for ``endpoint_name`` (found by name prefix and tag)."""
    wanted = {CREATED_BY_TAG[0]: CREATED_BY_TAG[1], ENDPOINT_TAG: endpoint_name}
    prefix = endpoint_name[:40]

    def tagged(kind: str, list_key: str, name_key: str, arn_key: str) -> list[str]:
        with aws_call(f"list {kind}s"):
            pages = sagemaker.get_paginator(f"list_{kind}s").paginate(NameContains=prefix)
            items = [item for page in pages for item in page.get(list_key, [])]
        return [
            item[name_key]
            for item in items
            if item[name_key].startswith(prefix) and wanted.items() <= resource_tags(sagemaker, item[arn_key]).items()
        ]

    configs = tagged("endpoint_config", "EndpointConfigs", "EndpointConfigName", "EndpointConfigArn")
    models = tagged("model", "Models", "ModelName", "ModelArn")
    return tuple(configs), tuple(models)


def resources_of_endpoint(sagemaker: Any, name: str) -> Resources:
    """The endpoint, its config and the config's models; if the endpoint is gone, loadgen's leftovers."""
    description = describe_endpoint_or_none(sagemaker, name)
    if description is None:
        configs, models = _orphans_of(sagemaker, name)
        return Resources(None, configs, models)
    config_name = description["EndpointConfigName"]
    with aws_call(f"describe endpoint config '{config_name}'"):
        try:
            config = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
            models = tuple(v["ModelName"] for v in config.get("ProductionVariants", []) if v.get("ModelName"))
        except ClientError as err:
            if not is_not_found(err):
                raise
            models = ()
    return Resources(name, (config_name,), models)


def delete_endpoint_named(
    name: str,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    poll_s: float = 5.0,
    wait_timeout_s: float = 1800.0,
    on_status: StatusCallback | None = None,
) -> Teardown:
    aws = AwsConfig(region=region, endpoint_url=endpoint_url)
    resources = resources_of_endpoint(aws.sagemaker(), name)
    if resources.endpoint is None:
        resources = Resources(name, resources.endpoint_configs, resources.models)  # report it as already gone
    return delete_resources(resources, aws, poll_s=poll_s, wait_timeout_s=wait_timeout_s, on_status=on_status)
