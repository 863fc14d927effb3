"""What exists: one endpoint's status, and every endpoint loadgen created (by tag)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..errors import AwsError
from ..timefmt import iso
from .resources import (
    ENDPOINT_TAG,
    LOADGEN_TAGS,
    RUN_ID_TAG,
    describe_endpoint_or_none,
    resource_tags,
    tagged,
)
from .session import AwsConfig


def _iso(value: Any) -> str | None:
    return iso(value) if isinstance(value, datetime) else None


def endpoint_status(name: str, *, region: str | None = None, endpoint_url: str | None = None) -> dict[str, Any]:
    """A JSON-able summary of DescribeEndpoint (+ the instance type from its config)."""
    aws = AwsConfig(region=region, endpoint_url=endpoint_url)
    sagemaker = aws.sagemaker()
    description = describe_endpoint_or_none(sagemaker, name)
    if description is None:
        raise AwsError(f"endpoint '{name}' not found in {aws.resolved_region()}; check the name and --region")
    variants = description.get("ProductionVariants") or [{}]
    created, modified = description.get("CreationTime"), description.get("LastModifiedTime")
    tags = resource_tags(sagemaker, description["EndpointArn"])
    return {
        "name": name,
        "status": description["EndpointStatus"],
        "failure_reason": description.get("FailureReason"),
        "endpoint_config": description.get("EndpointConfigName"),
        "instance_count": variants[0].get("CurrentInstanceCount"),
        "created": _iso(created),
        "last_modified": _iso(modified),
        "created_by_loadgen": LOADGEN_TAGS.items() <= tags.items(),
        "run_id": tags.get(RUN_ID_TAG),
    }


def _loadgen_items(sagemaker: Any, kind: str) -> list[dict[str, Any]]:
    """Items of ``kind`` (endpoint, endpoint_config, model) tagged as created by loadgen."""
    return [
        {
            "kind": kind,
            "name": name,
            "status": item.get("EndpointStatus"),
            "created": _iso(item.get("CreationTime")),
            "run_id": tags.get(RUN_ID_TAG),
            "endpoint": tags.get(ENDPOINT_TAG),
        }
        for name, item, tags in tagged(sagemaker, kind, LOADGEN_TAGS)
    ]


def list_deployments(
    *, region: str | None = None, endpoint_url: str | None = None, include_orphans: bool = False
) -> list[dict[str, Any]]:
    """Endpoints loadgen created; with ``include_orphans`` also configs/models whose endpoint is gone."""
    sagemaker = AwsConfig(region=region, endpoint_url=endpoint_url).sagemaker()
    rows = _loadgen_items(sagemaker, "endpoint")
    if include_orphans:
        live = {row["name"] for row in rows}
        for kind in ("endpoint_config", "model"):
            for row in _loadgen_items(sagemaker, kind):
                if row["endpoint"] not in live:
                    rows.append({**row, "status": "orphan"})
    return rows
