"""Delete what a deployment made: from its record, or from an endpoint name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from ..record import now_iso
from .errors import aws_call, is_not_found
from .record import DELETED, Deployment, load_record
from .resources import (
    ENDPOINT_TAG,
    LOADGEN_TAGS,
    Resources,
    StatusCallback,
    Teardown,
    delete_resources,
    describe_endpoint_or_none,
    tagged,
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
        dep.saved(status=DELETED, deleted_at=now_iso())
    return result


# ---------------------------------------------------------------------------
# Delete by endpoint name (no record at hand)


def _orphans_of(sagemaker: Any, endpoint_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Configs/models loadgen created for ``endpoint_name`` (found by name prefix and tag)."""
    wanted = {**LOADGEN_TAGS, ENDPOINT_TAG: endpoint_name}
    prefix = endpoint_name[:40]
    configs = tagged(sagemaker, "endpoint_config", wanted, name_prefix=prefix)
    models = tagged(sagemaker, "model", wanted, name_prefix=prefix)
    return tuple(name for name, _, _ in configs), tuple(name for name, _, _ in models)


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
