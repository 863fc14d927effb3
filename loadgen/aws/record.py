"""The deployment record: what one deploy planned, created and observed, as JSON.

It is written before each resource is created (with the names planned) and
after each step, so a crash or Ctrl-C at any moment leaves a file that teardown
can use: deleting a name that was never created is not an error. It never holds
secrets: environment values whose names look secret are replaced by ``***``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ..atomic import write_atomic
from ..errors import ConfigError

RECORD_FORMAT = "loadgen-sagemaker-deployment/1"

# Created resources, in creation order (teardown runs in reverse).
MODEL, ENDPOINT_CONFIG, ENDPOINT = "model", "endpoint_config", "endpoint"

# Statuses after which nothing of this deployment bills any more.
DELETED = "Deleted"
NOT_CREATED = "NotCreated"


@dataclass(frozen=True)
class Deployment:
    """One deployment; also the JSON record (``record_path`` is not serialised)."""

    endpoint_name: str
    endpoint_config_name: str
    model_name: str
    run_id: str
    region: str
    endpoint_url: str | None = None
    created: tuple[str, ...] = ()  # MODEL, ENDPOINT_CONFIG, ENDPOINT as each succeeds
    # NotCreated, Creating, InService, Failed, Deleted (or another SageMaker status).
    status: str = NOT_CREATED
    failure_reason: str | None = None
    created_at: str | None = None  # UTC time of the CreateEndpoint call
    # create-to-InService by loadgen's own monotonic clock (poll granularity),
    # and by SageMaker's CreationTime -> LastModifiedTime (cross-check).
    seconds_to_in_service: float | None = None
    aws_seconds_to_in_service: float | None = None
    deleted_at: str | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)  # redacted DeploySpec
    facts: Mapping[str, Any] | None = None  # parsed vLLM startup log (loadgen.vllm.facts keys)
    log_tail: tuple[str, ...] = ()  # last CloudWatch log lines, on failure
    record_path: Path | None = field(default=None, compare=False)

    @property
    def in_service(self) -> bool:
        return self.status == "InService"

    @property
    def is_live(self) -> bool:
        """Something of it may exist (and bill). A create call interrupted mid-flight may
        have succeeded without ``created`` saying so, so only a teardown makes it False."""
        return self.status != DELETED

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("record_path")
        data["created"] = list(self.created)
        data["log_tail"] = list(self.log_tail)
        return {"format": RECORD_FORMAT, **data}

    def saved(self, **changes: Any) -> "Deployment":
        """A copy with ``changes``, written to ``record_path`` (if any) before returning."""
        updated = replace(self, **changes)
        if updated.record_path is not None:
            save_record(updated)
        return updated

    def with_created(self, resource: str) -> "Deployment":
        return self.saved(created=(*self.created, resource))


def save_record(deployment: Deployment) -> None:
    """Atomic write (temp file + rename): a reader never sees half a record."""
    path = deployment.record_path
    assert path is not None
    write_atomic(path, json.dumps(deployment.to_json(), indent=2, sort_keys=False) + "\n")


_FIELDS = set(Deployment.__dataclass_fields__) - {"record_path"}


def load_record(path: str | Path) -> Deployment:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"deployment record {path} does not exist; pass the file written by loadgen endpoint deploy"
        ) from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read deployment record {path}: {err}") from None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise ConfigError(f"{path} is not a loadgen deployment record (expected format {RECORD_FORMAT})")
    values = {key: value for key, value in data.items() if key in _FIELDS}
    try:
        values["created"] = tuple(values.get("created", ()))
        values["log_tail"] = tuple(values.get("log_tail", ()))
        return Deployment(**values, record_path=path)
    except TypeError as err:
        raise ConfigError(f"deployment record {path} is incomplete: {err}") from None
