"""Amazon SageMaker real-time endpoints: InvokeEndpointWithResponseStream and InvokeEndpoint.

Transport: aiohttp + botocore, not aiobotocore. botocore supplies credentials,
region, endpoint resolution, SigV4 signing, error parsing and event-stream frame
decoding (see :mod:`.sagemaker_aws`, :mod:`loadgen.codecs.event_stream`); aiohttp supplies a
fully async, pooled HTTP/1.1 keep-alive transport whose ``iter_any()`` lets us
timestamp every socket read *before* frame decoding, exactly like the HTTP target.
aiobotocore was considered: its newest release (3.10.0) pins
``botocore>=1.43.115,<1.43.118``, which conflicts with the botocore 1.44 that boto3
here needs, and its event-stream iterator (botocore's ``EventStream``) raises on the
first exception frame and drops ``ModelStreamError.ErrorCode``. Boto3 calls on a
thread per stream were ruled out: threads distort timings at concurrency 16+.

Usage::

    target = SageMakerTarget.from_url("sagemaker://my-endpoint?region=us-east-2", options)
    async with open_target(target):
        await target.send(Prompt("Hello", max_tokens=64), record)
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import botocore.session
import orjson

from ..codecs.event_stream import EventStreamReader
from ..codecs.http1 import RequestHead
from ..codecs.sagemaker_formats import (
    AutoStreamParser,
    check_payload_format,
    make_stream_parser,
    parse_body,
    request_body,
)
from ..config import TRANSPORTS, RequestOptions
from ..errors import AuthError, ConfigError, TargetError
from ..record import Prompt, RequestRecord
from .base import PreparedRequest, Successor
from .http_pool import HTTPPool
from .sagemaker_aws import (
    AwsSetup,
    RequestSigner,
    host_header,
    resolve_region,
    setup_aws,
)
from .session import AiohttpTransport, ChainedSend, Connections

SCHEME = "sagemaker"
# SageMaker's EndpointName rule (botocore's service model: this pattern, at most 63).
_ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
# Requests signed ahead of their send are signed again past this age (SigV4 allows 5 minutes).
_RESIGN_AFTER_NS = 60 * 10**9
# Rejected credentials or signatures: fail fast at preflight.
_AUTH_ERRORS = {"UnrecognizedClientException", "InvalidSignatureException",
                "ExpiredTokenException", "AccessDeniedException", "IncompleteSignature",
                "MissingAuthenticationTokenException", "InvalidClientTokenId"}
# Preflight failures that say nothing about the configuration: the run goes ahead.
_TRANSIENT_ERRORS = {"ThrottlingException", "ModelNotReadyException", "ServiceUnavailable",
                     "InternalFailure", "InternalDependencyException", "timeout"}


def is_endpoint_name(name: str) -> bool:
    """Whether SageMaker accepts ``name`` as an endpoint name (deploying or invoking)."""
    return len(name) <= 63 and _ENDPOINT_NAME.fullmatch(name) is not None


class SageMakerTarget:
    def __init__(self, endpoint_name: str, options: RequestOptions, *, region: str | None = None,
                 endpoint_url: str | None = None, inference_component: str | None = None,
                 custom_attributes: str | None = None, target_variant: str | None = None,
                 payload_format: str = "auto", pool_size: int = 100) -> None:
        if not is_endpoint_name(endpoint_name):
            raise ConfigError(f"bad SageMaker endpoint name {endpoint_name!r}: use letters, digits "
                              "and hyphens (at most 63), as in sagemaker://my-endpoint")
        if custom_attributes is not None and (len(custom_attributes) > 1024
                                              or not custom_attributes.isascii()):
            raise ConfigError("--custom-attributes must be at most 1024 ASCII characters")
        if pool_size < 1:
            raise ConfigError(f"pool size must be at least 1, got {pool_size}")
        if options.transport not in TRANSPORTS:
            raise ConfigError(f"--transport must be one of {', '.join(TRANSPORTS)} "
                              f"(got {options.transport!r})")
        self.endpoint_name = endpoint_name
        self.options = options
        self.payload_format = check_payload_format(payload_format)
        self.pool_size = pool_size
        self._region_arg = region
        self._endpoint_url_arg = endpoint_url.rstrip("/") if endpoint_url else None
        self._headers = _invoke_headers(inference_component, custom_attributes, target_variant)
        self._extra = {"inference_component": inference_component,
                       "target_variant": target_variant, "custom_attributes": custom_attributes}
        self._aws: AwsSetup | None = None
        self._signer: RequestSigner | None = None
        self._connections = Connections()
        self._head: RequestHead | None = None
        self._url = ""
        self.detected_format: str | None = None  # what ``auto`` found at preflight

    @classmethod
    def from_url(cls, url: str, options: RequestOptions, **keywords: Any) -> "SageMakerTarget":
        """``sagemaker://ENDPOINT_NAME[?region=R]``; keywords as for the constructor."""
        from ..targetspec import TargetSpec  # the one parser of target URLs

        spec = TargetSpec(url, **{k: v for k, v in keywords.items() if k != "pool_size"})
        if not spec.is_sagemaker:
            raise ConfigError(f"bad SageMaker target {url!r}: write sagemaker://ENDPOINT_NAME"
                              "[?region=REGION]")
        keywords["region"] = spec.region
        return cls(spec.endpoint_name, options, **keywords)

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        session = botocore.session.get_session()
        resolve_region(session, self._region_arg)  # cheap: fail on a missing region first
        self._aws = aws = await asyncio.to_thread(setup_aws, session, self._region_arg,
                                                  self._endpoint_url_arg)
        self._signer = RequestSigner(aws.credentials, aws.frozen, aws.region)
        operation = "invocations-response-stream" if self.options.stream else "invocations"
        self._url = f"{aws.endpoint_url}/endpoints/{self.endpoint_name}/{operation}"
        if self.options.transport == "stream":
            self._start_pool()
        else:
            self._connections.aiohttp = AiohttpTransport(self.options.timeouts, self.pool_size)
        try:
            await self._preflight()
        except BaseException:
            await self.close()
            raise

    def _start_pool(self) -> None:
        path = urlsplit(self._url).path
        self._head = RequestHead("POST", path, host_header(self._url), self._headers)
        self._connections.pool = HTTPPool.for_url(self._url, self.options.timeouts,
                                                  self.pool_size)

    async def open_connections(self, connections: int) -> None:
        """Open ``connections`` connections now, before a level starts measuring."""
        await self._connections.open_connections(connections)

    def statistics(self) -> dict[str, int]:
        """Connection counters (opened, reconnects, closed by the server) since open()."""
        return self._connections.statistics()

    async def close(self) -> None:
        await self._connections.close()
        if self._signer is not None:
            await self._signer.aclose()

    def describe(self) -> dict[str, Any]:
        aws = self._aws
        description = {
            "url": f"{SCHEME}://{self.endpoint_name}", "kind": "sagemaker",
            "endpoint": self.endpoint_name,
            "region": aws.region if aws else self._region_arg,
            "endpoint_url": aws.endpoint_url if aws else self._endpoint_url_arg,
            "api": self.options.api, "model": self.options.model,
            "ignore_eos": self.options.ignore_eos, "payload_format": self.payload_format,
            "detected_payload_format": self.detected_format,
            "stream": self.options.stream, "transport": self.options.transport,
        }
        description.update({key: value for key, value in self._extra.items() if value is not None})
        return description

    async def _preflight(self) -> None:
        """One tiny request: proves the endpoint exists, accepts our signature and our payload."""
        record = RequestRecord()
        status = await self._exchange(self.prepare(Prompt("Hi", max_tokens=1), record), record)
        error, message = record.error_type, (record.error_message or "").rstrip(".")
        if error is None or error in _TRANSIENT_ERRORS:
            return
        assert self._aws is not None
        where = f"SageMaker endpoint {self.endpoint_name!r} ({self._aws.endpoint_url})"
        if status in (401, 403) or error in _AUTH_ERRORS:
            raise AuthError(f"AWS rejected the request signature/credentials for {where}: "
                            f"{error}: {message}; check AWS_PROFILE / keys, permissions "
                            "(sagemaker:InvokeEndpoint) and the region")
        if status is None and error == "connect_error":
            raise TargetError(f"cannot reach {where}: {message}; check --endpoint-url and --region")
        hint = ("; check --payload-format" if error in ("bad_json", "truncated_stream")
                else "")
        raise TargetError(f"{where} failed the preflight request with {error}: {message}{hint}")

    # ------------------------------------------------------------------ requests

    def prepare(self, prompt: Prompt, record: RequestRecord) -> PreparedRequest:
        """Body, SigV4 headers and, for the streaming transport, the request's exact bytes."""
        assert self._signer is not None, "open() the target first"
        body = orjson.dumps(request_body(self.payload_format, prompt, self.options))
        headers = self._signer.sign(self._url, body, self._headers)
        return PreparedRequest(body, self._render(body, headers), headers)

    def _render(self, body: bytes, headers: dict[str, str]) -> bytes | None:
        if self._head is None:
            return None
        # Only the signature headers change per request; the rest is in the prebuilt head.
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items()
                        if name not in self._headers and name != "Host").encode("latin-1")
        return self._head.render(body, extra=extra)

    async def send(self, prompt: Prompt, record: RequestRecord) -> None:
        await self._exchange(self.prepare(prompt, record), record)

    async def send_prepared(self, prepared: PreparedRequest, record: RequestRecord,
                            on_sent: Callable[[], None] | None = None) -> None:
        if time.perf_counter_ns() - prepared.made_ns > _RESIGN_AFTER_NS:
            prepared = self._resigned(prepared)
        await self._exchange(prepared, record, on_sent)

    async def send_chained(self, prepared: PreparedRequest, record: RequestRecord,
                           on_sent: Callable[[], None] | None, successor: Successor,
                           started: Any = None) -> None:
        """``send_prepared`` with the fast path (:mod:`.http_pool`): ``started`` is a
        request the pool already wrote (signed) as the stream's previous response ended."""
        if started is None:
            if time.perf_counter_ns() - prepared.made_ns > _RESIGN_AFTER_NS:
                prepared = self._resigned(prepared)
        follow = (ChainedSend(successor, on_sent, self._fresh_wire, self._respond)
                  if self._connections.pool is not None else None)
        await self._exchange(prepared, record, on_sent, follow, started)

    def _fresh_wire(self, prepared: PreparedRequest) -> bytes | None:
        """The bytes of a prepared request, signed again if its signature is getting old."""
        if time.perf_counter_ns() - prepared.made_ns > _RESIGN_AFTER_NS:
            prepared = self._resigned(prepared)
        return prepared.wire

    def _respond(self, record: RequestRecord) -> SageMakerResponse:
        return SageMakerResponse(record, self)

    def _resigned(self, prepared: PreparedRequest) -> PreparedRequest:
        """A signature is valid for 5 minutes: one made long before its send is made again."""
        assert self._signer is not None
        headers = self._signer.sign(self._url, prepared.body, self._headers)
        return PreparedRequest(prepared.body, self._render(prepared.body, headers), headers)

    async def _exchange(self, prepared: PreparedRequest, record: RequestRecord,
                        on_sent: Callable[[], None] | None = None,
                        follow: ChainedSend | None = None,
                        started: Any = None) -> int | None:
        """Send one request and fill ``record``. Returns the HTTP status (None: no response)."""
        assert self._aws is not None, "open() the target first"
        if started is not None:
            response = started.handler
        else:
            record.start_ns = record.start_ns or time.perf_counter_ns()
            response = SageMakerResponse(record, self)
        await self._connections.send(self._url, prepared, record, response, on_sent, follow,
                                     started)
        if response.detected_format and self.detected_format is None:
            self.detected_format = response.detected_format
        return response.status or None


class SageMakerResponse:
    """One InvokeEndpoint(WithResponseStream) response -> its record (no I/O; both transports).

    A 200 stream goes through :class:`loadgen.codecs.event_stream.EventStreamReader` with each read's
    arrival time; a 200 body is parsed whole; other statuses are AWS errors, parsed by botocore.
    """

    __slots__ = ("record", "target", "status", "reader", "parser", "detected_format", "_headers",
                 "_body")

    def __init__(self, record: RequestRecord, target: SageMakerTarget) -> None:
        self.record = record
        self.target = target
        self.status = 0
        self.reader: EventStreamReader | None = None
        self.parser = None
        self.detected_format: str | None = None
        self._headers: Any = {}
        self._body: list[bytes] = []

    def on_headers(self, status: int, headers, now_ns: int) -> None:
        self.status, self._headers = status, headers
        target = self.target
        if status == 200 and target.options.stream:
            self.parser = make_stream_parser(target.payload_format, self.record,
                                             target.options.keep_text,
                                             headers.get("x-amzn-sagemaker-content-type"))
            self.reader = EventStreamReader(self.record, self.parser)

    def on_body(self, data: bytes, now_ns: int) -> None:
        if self.reader is not None:
            self.reader.feed(data, now_ns)
        else:
            self._body.append(data)

    def on_complete(self, now_ns: int) -> None:
        target, body = self.target, b"".join(self._body)
        if self.reader is not None:
            self.reader.close(now_ns)
            if isinstance(self.parser, AutoStreamParser):
                self.detected_format = self.parser.format
        elif self.status != 200:
            assert target._aws is not None
            code, message = target._aws.errors.parse(self.status, self._headers, body)
            self.record.fail(code, message, now_ns)
        else:
            used = parse_body(target.payload_format, self.record, body, now_ns,
                              target.options.keep_text)
            if target.payload_format == "auto":
                self.detected_format = used

    def on_failure(self, error_type: str, message: str, now_ns: int) -> None:
        self.record.fail(error_type, message, now_ns)
        self.cut_short(now_ns)

    def cut_short(self, now_ns: int) -> None:
        """Failure or cancellation: tokens parsed so far stay on the record."""
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close(now_ns, cut_short=True)
        self.record.end_ns = self.record.end_ns or now_ns


def _invoke_headers(inference_component: str | None, custom_attributes: str | None,
                    target_variant: str | None) -> dict[str, str]:
    # Like boto3: no compression, so body bytes arrive as the container wrote them.
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    optional = {"X-Amzn-SageMaker-Inference-Component": inference_component,
                "X-Amzn-SageMaker-Custom-Attributes": custom_attributes,
                "X-Amzn-SageMaker-Target-Variant": target_variant}
    headers.update({name: value for name, value in optional.items() if value})
    return headers

