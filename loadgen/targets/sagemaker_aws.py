"""AWS plumbing for the SageMaker target, all from botocore's public pieces.

- region and endpoint URL: the botocore session's config chain and endpoint
  resolution (``client.meta``), so other partitions and FIPS settings work;
- credentials: the standard chain (env, profile, SSO, container/instance role);
- SigV4 signing: :func:`sigv4_headers`, checked against :class:`botocore.auth.SigV4Auth` in the
  tests. botocore's signer costs 150-300 µs of pure Python per request (request objects, URL
  parsing, header maps); at 256 lockstep streams that alone sent the last request ~70 ms late.
  One fixed request shape (POST, no query, hashed body) needs two SHA-256 and one HMAC in C;
  the signing key is derived once a day;
- error responses: botocore's rest-json parser and the sagemaker-runtime service model.

Blocking botocore work (credential providers may call STS, IMDS or SSO) runs once
at open on a worker thread. Per request, signing is pure CPU; when refreshable
credentials near expiry, the refresh runs on a worker thread while requests keep
signing with the current (still valid) keys. Nothing here ever logs or returns
keys or signatures.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote, urlsplit

import botocore.session
from botocore import UNSIGNED
from botocore.auth import SIGNED_HEADERS_BLACKLIST
from botocore.awsrequest import HeadersDict
from botocore.config import Config
from botocore.credentials import ReadOnlyCredentials
from botocore.exceptions import BotoCoreError
from botocore.parsers import ResponseParserError, create_parser
from botocore.utils import normalize_url_path

from ..errors import AuthError, ConfigError, one_line

SIGNING_NAME = "sagemaker"  # the service model's signingName for sagemaker-runtime
# How often (at most) to ask refreshable credentials whether they near expiry.
_REFRESH_CHECK_NS = 1_000_000_000

NO_CREDENTIALS_HELP = ("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                       "or AWS_PROFILE (run `aws sso login` for SSO profiles), or run on an "
                       "instance/container role")


@dataclass(frozen=True)
class AwsSetup:
    """Everything resolved at open: where to send, how to sign, how to read errors."""

    region: str
    endpoint_url: str  # scheme://host[:port], no trailing slash
    credentials: Any  # botocore Credentials / RefreshableCredentials
    frozen: ReadOnlyCredentials  # a snapshot of them (reading it may have refreshed them)
    errors: "ErrorParser"


def resolve_region(session: botocore.session.Session, region: str | None) -> str:
    region = region or session.get_config_variable("region")
    if not region:
        raise ConfigError("no AWS region: pass --region, add ?region=R to the sagemaker:// URL, "
                          "or set AWS_DEFAULT_REGION / a profile region")
    return region


def setup_aws(session: botocore.session.Session, region: str | None,
              endpoint_url: str | None) -> AwsSetup:
    """Blocking: call from a worker thread. Raises ConfigError / AuthError with one line."""
    region = resolve_region(session, region)
    try:
        # UNSIGNED: the client is only used for endpoint resolution and its service model,
        # so creating it must not trigger a credential lookup of its own.
        client = session.create_client("sagemaker-runtime", region_name=region,
                                       endpoint_url=endpoint_url,
                                       config=Config(signature_version=UNSIGNED))
    except (BotoCoreError, ValueError) as err:
        raise ConfigError(f"bad AWS region or endpoint URL ({region!r}, {endpoint_url!r}): "
                          f"{one_line(err, 500)}") from None
    try:
        credentials = session.get_credentials()
    except BotoCoreError as err:
        raise AuthError(f"AWS credentials could not be loaded ({type(err).__name__}): "
                        f"{one_line(err, 500)}") from None
    if credentials is None:
        raise AuthError(NO_CREDENTIALS_HELP)
    try:
        frozen = credentials.get_frozen_credentials()
    except BotoCoreError as err:
        raise AuthError(f"AWS credentials could not be refreshed ({type(err).__name__}): "
                        f"{one_line(err, 500)}") from None
    return AwsSetup(region=region, endpoint_url=client.meta.endpoint_url.rstrip("/"),
                    credentials=credentials, frozen=frozen,
                    errors=ErrorParser(client.meta.service_model))


def host_header(url: str) -> str:
    """The Host header for ``url``: lower-case host, port only when not the scheme's default."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


class RequestSigner:
    """SigV4 for service ``sagemaker``: returns the exact headers to send with the body."""

    def __init__(self, credentials: Any, frozen: ReadOnlyCredentials, region: str) -> None:
        self._credentials = credentials
        self._region = region
        # Snapshot used for signing; replaced when a background refresh completes.
        self._frozen = frozen
        self._refresh: asyncio.Future | None = None
        self._next_check_ns = 0

    def sign(self, url: str, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        """Must be called from the event loop (it may schedule a credential refresh)."""
        return sigv4_headers(self._current_credentials(), self._region, url, body, headers)

    def _current_credentials(self) -> ReadOnlyCredentials:
        now = time.perf_counter_ns()
        if now >= self._next_check_ns and self._refresh is None:
            self._next_check_ns = now + _REFRESH_CHECK_NS
            refresh_needed = getattr(self._credentials, "refresh_needed", None)
            if refresh_needed is not None and refresh_needed():
                # botocore refreshes inside get_frozen_credentials(); it may block on the network.
                loop = asyncio.get_running_loop()
                self._refresh = loop.run_in_executor(None, self._credentials.get_frozen_credentials)
                self._refresh.add_done_callback(self._on_refreshed)
        return self._frozen

    def _on_refreshed(self, future: asyncio.Future) -> None:
        self._refresh = None
        if not future.cancelled() and future.exception() is None:
            self._frozen = future.result()
        # On failure keep the old keys: if they expire, requests fail with a 403 type, counted.

    async def aclose(self) -> None:
        if self._refresh is not None:
            await asyncio.wait([self._refresh])


# Headers SigV4 never signs (botocore.auth.SIGNED_HEADERS_BLACKLIST).
_UNSIGNED = frozenset(SIGNED_HEADERS_BLACKLIST)


@functools.lru_cache(maxsize=64)
def _canonical_path(url: str) -> tuple[str, str]:
    """(canonical URI path, Host header) of ``url``, as botocore derives them."""
    return quote(normalize_url_path(urlsplit(url).path), safe="/~"), host_header(url)


@functools.lru_cache(maxsize=16)
def _signing_key(secret_key: str, day: str, region: str) -> bytes:
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, SIGNING_NAME, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sigv4_headers(credentials: ReadOnlyCredentials, region: str, url: str, body: bytes,
                  headers: Mapping[str, str], amz_date: str | None = None) -> dict[str, str]:
    """``headers`` plus Host, X-Amz-Date, X-Amz-Security-Token (when there is a session token)
    and Authorization: AWS SigV4 for a POST of ``body`` to ``url`` (no query string), the
    same bytes botocore's ``SigV4Auth.add_auth`` produces for the same request and time."""
    amz_date = amz_date or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    day = amz_date[:8]
    path, host = _canonical_path(url)
    out = {name: value for name, value in headers.items()
           if name.lower() not in ("host", "x-amz-date", "x-amz-security-token", "authorization")}
    out["Host"] = host
    out["X-Amz-Date"] = amz_date
    if credentials.token:
        out["X-Amz-Security-Token"] = credentials.token
    signed = {name.lower(): " ".join(value.split()) for name, value in out.items()
              if name.lower() not in _UNSIGNED}
    names = sorted(signed)
    signed_names = ";".join(names)
    canonical = "\n".join(("POST", path, "", "".join(f"{n}:{signed[n]}\n" for n in names),
                           signed_names, hashlib.sha256(body).hexdigest()))
    scope = f"{day}/{region}/{SIGNING_NAME}/aws4_request"
    to_sign = (f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n"
               f"{hashlib.sha256(canonical.encode()).hexdigest()}")
    signature = hmac.new(_signing_key(credentials.secret_key, day, region), to_sign.encode(),
                         hashlib.sha256).hexdigest()
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                            f"SignedHeaders={signed_names}, Signature={signature}")
    return out


class ErrorParser:
    """Non-200 responses -> (error type, one-line message), the way botocore's client reads them."""

    def __init__(self, service_model: Any) -> None:
        self._service_model = service_model
        self._output_shape = service_model.operation_model("InvokeEndpoint").output_shape
        self._parser = create_parser(service_model.metadata["protocol"])

    def parse(self, status: int, headers: Mapping[str, str], body: bytes) -> tuple[str, str]:
        response = {"status_code": status, "headers": HeadersDict(headers.items()), "body": body}
        try:
            error = self._parser.parse(response, self._output_shape).get("Error", {})
            code = str(error.get("Code") or "")
            message = str(error.get("Message") or "")
            shape = self._service_model.shape_for_error_code(code) if code else None
            modeled = self._parser.parse(response, shape) if shape is not None else {}
        except (ResponseParserError, ValueError, TypeError):
            code, message, modeled = "", body[:200].decode("utf-8", "replace"), {}
        if not code or code.isdigit():
            code = f"http_{status}"
        return code, one_line(_with_model_details(message, modeled), 500)


def _with_model_details(message: str, modeled: Mapping[str, Any]) -> str:
    """ModelError carries the container's own status, message and CloudWatch log stream."""
    extras = [f"{key}={modeled[key]}" for key in ("OriginalStatusCode", "OriginalMessage",
                                                  "LogStreamArn") if modeled.get(key) is not None]
    return f"{message} ({', '.join(extras)})" if extras else message

