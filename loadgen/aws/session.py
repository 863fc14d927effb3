"""boto3 clients for the control plane (SageMaker, CloudWatch Logs).

``endpoint_url`` applies to every client made from one :class:`AwsConfig`: that
is what a local emulator (moto) needs. For per-service VPC endpoints, leave it
unset and use botocore's own ``AWS_ENDPOINT_URL_SAGEMAKER`` /
``AWS_ENDPOINT_URL_CLOUDWATCH_LOGS`` environment variables.

Credentials come from boto3's usual chain (env, profile, SSO, instance role);
loadgen never reads, stores or prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

from ..errors import ConfigError
from .errors import aws_call


@dataclass(frozen=True)
class AwsConfig:
    """Where and how to call AWS. Clients are made once per config and reused
    (making one loads the service model: ~0.2 s)."""

    region: str | None = None  # None: boto3's default (AWS_REGION, profile)
    endpoint_url: str | None = None  # e.g. http://127.0.0.1:5000 for moto
    # botocore's "standard" retry mode: backs off on throttling and connection errors.
    max_attempts: int = 3
    _clients: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def resolved_region(self) -> str:
        if self.region:
            return self.region
        with aws_call("find the AWS region"):  # e.g. ProfileNotFound for a bad AWS_PROFILE
            region = boto3.session.Session().region_name
        if not region:
            raise ConfigError("no AWS region: pass --region or set AWS_REGION")
        return region

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._new_client(service)
        return self._clients[service]

    def _new_client(self, service: str) -> Any:
        region = self.resolved_region()
        with aws_call(f"create the {service} client"):
            session = boto3.session.Session(region_name=region)
            config = Config(
                retries={"max_attempts": self.max_attempts, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
                user_agent_extra="loadgen",
            )
            return session.client(service, endpoint_url=self.endpoint_url, config=config)

    def sagemaker(self) -> Any:
        return self.client("sagemaker")

    def logs(self) -> Any:
        return self.client("logs")
