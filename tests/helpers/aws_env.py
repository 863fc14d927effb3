"""Test AWS environments: fake credentials, no local AWS config, and moto in server mode."""

from __future__ import annotations

import logging
import time
import urllib.request

import boto3
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

_LEAKY_VARIABLES = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION",
                    "AWS_ENDPOINT_URL", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "HF_TOKEN")


def isolate_aws(monkeypatch, tmp_path, *, access_key: str = "testing",
                secret_key: str = "testing", region: str = "us-east-1") -> None:
    """Credentials from env vars only; nothing from this machine's AWS config or metadata."""
    for name in _LEAKY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def start_moto() -> tuple[ThreadedMotoServer, str]:
    """moto in server mode on 127.0.0.1 (a free port); returns the server and its URL."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def reset_moto(url: str) -> None:
    """A clean moto account for the next test."""
    request = urllib.request.Request(url + "/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def write_endpoint_log(url: str, region: str, endpoint: str, lines: list[str], *,
                       minutes_ago: float = 0.0) -> None:
    """Put ``lines`` into the endpoint's CloudWatch log group, as SageMaker would
    (moto never creates endpoint log groups itself)."""
    logs = boto3.session.Session().client("logs", endpoint_url=url, region_name=region)
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    stream = f"AllTraffic/i-{int(minutes_ago * 1000):06d}0abc"
    for create in (lambda: logs.create_log_group(logGroupName=group),
                   lambda: logs.create_log_stream(logGroupName=group, logStreamName=stream)):
        try:
            create()
        except ClientError as err:
            assert err.response["Error"]["Code"] == "ResourceAlreadyExistsException"
    start_ms = int((time.time() - minutes_ago * 60) * 1000)
    events = [{"timestamp": start_ms + i, "message": line} for i, line in enumerate(lines)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
