"""SageMakerTarget end to end against the test SageMaker-runtime server on 127.0.0.1.

Real botocore code paths throughout: credentials from env vars (the standard chain),
SigV4 signing checked by the server, endpoint_url pointed at the server, botocore's
event-stream decoder and rest-json error parser.
"""

import asyncio
import json

import boto3
import botocore.exceptions
import botocore.session
import pytest
from botocore.credentials import ReadOnlyCredentials, RefreshableCredentials

from loadgen.config import RequestOptions, Timeouts
from loadgen.errors import AuthError, ConfigError, TargetError
from loadgen.record import TOKENS_FROM_USAGE, Prompt, RequestRecord
from tests.helpers.sagemaker_server import (
    ACCESS_KEY,
    FAULT_AFTER,
    LOG_STREAM_ARN,
    REGION,
    SECRET_KEY,
    SageMakerTestServer,
    ServerConfig,
    expected_text,
    stream_events,
)
from loadgen.targets.base import Target, open_target
from loadgen.targets.sagemaker import SageMakerTarget
from loadgen.targets.sagemaker_aws import RequestSigner, setup_aws
from tests.helpers.aws_env import isolate_aws

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

TOKENS = 10


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """Test credentials in env vars; nothing from this machine's AWS config or metadata service."""
    isolate_aws(monkeypatch, tmp_path, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)


@pytest.fixture(scope="module")
def server():
    with SageMakerTestServer(ServerConfig(seed=7)) as running:
        yield running


def run_one(endpoint: str, server_url: str, options: RequestOptions = RequestOptions(),
            max_tokens: int = TOKENS, **keywords) -> tuple[RequestRecord, SageMakerTarget]:
    async def go():
        target = SageMakerTarget(endpoint, options, endpoint_url=server_url, **keywords)
        async with open_target(target):
            record = RequestRecord()
            await target.send(Prompt("Hello", max_tokens=max_tokens), record)
        return record, target
    return asyncio.run(go())


def open_only(endpoint: str, server_url: str | None, **keywords) -> SageMakerTarget:
    async def go():
        target = SageMakerTarget(endpoint, RequestOptions(), endpoint_url=server_url, **keywords)
        async with open_target(target):
            return target
    return asyncio.run(go())


# --------------------------------------------------------------------------- payload formats

@pytest.mark.parametrize("endpoint, detected", [
    ("openai", "openai"), ("lmi", "lmi"), ("tgi", "tgi"), ("lmi-chat", "lmi"),
    ("openai-bare", "openai"), ("lmi-bare", "lmi"), ("tgi-bare", "tgi")])
def test_streaming_formats_auto_detected(server, endpoint, detected):
    record, target = run_one(endpoint, server.url, RequestOptions(keep_text=True))
    assert record.ok, record.error_message
    assert record.text == expected_text(TOKENS)
    assert record.output_tokens == TOKENS and record.tokens_source == TOKENS_FROM_USAGE
    assert len(record.content_ns) == TOKENS
    assert record.start_ns < record.content_ns[0] <= record.content_ns[-1] <= record.end_ns
    assert target.describe()["detected_payload_format"] == detected


@pytest.mark.parametrize("payload_format", ["openai", "lmi", "tgi", "raw"])
def test_streaming_explicit_formats(server, payload_format):
    record, target = run_one(payload_format, server.url, RequestOptions(keep_text=True),
                             payload_format=payload_format)
    assert record.ok and record.text == expected_text(TOKENS)
    sent = server.requests[-1]["body"]
    if payload_format in ("lmi", "tgi"):
        assert sent["parameters"]["max_new_tokens"] == TOKENS and sent["stream"] is True
    else:
        assert sent["max_tokens"] == TOKENS and sent["stream_options"] == {"include_usage": True}
    assert target.describe()["payload_format"] == payload_format


@pytest.mark.parametrize("endpoint", ["openai", "lmi", "tgi", "raw"])
def test_non_streaming_invoke_endpoint(server, endpoint):
    record, target = run_one(endpoint, server.url, RequestOptions(stream=False, keep_text=True))
    assert record.ok and record.text == expected_text(TOKENS)
    assert record.content_ns == [record.end_ns]  # TTFT is the whole latency
    assert server.requests[-1]["operation"] == "invocations"
    assert server.requests[-1]["body"]["stream"] is False
    assert target.describe()["stream"] is False


def test_completions_api_through_sagemaker(server):
    record, _ = run_one("openai", server.url, RequestOptions(api="completions", keep_text=True))
    assert record.ok and record.text == expected_text(TOKENS)
    assert server.requests[-1]["body"]["prompt"] == "Hello"


# --------------------------------------------------------------------------- wire details

def test_headers_signature_and_describe(server):
    record, target = run_one("openai", server.url, inference_component="ic-1",
                             custom_attributes="route=/v1/chat/completions",
                             target_variant="AllTraffic")
    assert record.ok  # the server verified the SigV4 signature
    sent = server.requests[-1]
    assert sent["endpoint"] == "openai" and sent["operation"] == "invocations-response-stream"
    headers = sent["headers"]
    assert headers["X-Amzn-SageMaker-Inference-Component"] == "ic-1"
    assert headers["X-Amzn-SageMaker-Custom-Attributes"] == "route=/v1/chat/completions"
    assert headers["X-Amzn-SageMaker-Target-Variant"] == "AllTraffic"
    assert headers["Content-Type"] == "application/json" and "X-Amz-Date" in headers
    assert "model" not in sent["body"]  # the AWS vLLM container serves one model
    description = target.describe()
    assert description["url"] == "sagemaker://openai" and description["kind"] == "sagemaker"
    assert description["region"] == REGION and description["inference_component"] == "ic-1"
    text = json.dumps(description)
    assert ACCESS_KEY not in text and SECRET_KEY not in text and "Signature" not in text


def test_session_token_is_signed(server, monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "test-session-token")
    record, _ = run_one("openai", server.url)
    assert record.ok
    assert server.requests[-1]["headers"]["X-Amz-Security-Token"] == "test-session-token"


def test_concurrent_streams_share_one_pool(server):
    async def go():
        target = SageMakerTarget("openai", RequestOptions(), endpoint_url=server.url, pool_size=4)
        records = [RequestRecord() for _ in range(16)]
        async with open_target(target):
            assert isinstance(target, Target)
            async with asyncio.TaskGroup() as group:
                for record in records:
                    group.create_task(target.send(Prompt("Hi", max_tokens=6), record))
        return records
    records = asyncio.run(go())
    assert all(record.ok and record.output_tokens == 6 for record in records)


def test_timestamps_follow_server_pacing():
    config = ServerConfig(ttft_s=0.15, itl_s=0.03, coalesce=0.0)
    with SageMakerTestServer(config) as paced:
        record, _ = run_one("openai", paced.url, max_tokens=8)
    assert record.ok
    ttft_s = (record.content_ns[0] - record.start_ns) / 1e9
    gaps_s = [(b - a) / 1e9 for a, b in zip(record.content_ns, record.content_ns[1:])]
    assert 0.14 <= ttft_s < 2.0
    assert sum(gaps_s) / len(gaps_s) >= 0.02  # not all bunched up at the end


def test_idle_timeout_is_a_record_error():
    options = RequestOptions(timeouts=Timeouts(connect_s=5, total_s=30, idle_s=0.2))
    with SageMakerTestServer(ServerConfig(ttft_s=1.0)) as slow:
        record, _ = run_one("openai", slow.url, options)  # preflight timeout is transient
    assert record.error_type == "timeout"


def test_cancelled_send_keeps_tokens():
    async def go(url):
        target = SageMakerTarget("openai", RequestOptions(), endpoint_url=url)
        async with open_target(target):
            record = RequestRecord()
            task = asyncio.create_task(target.send(Prompt("Hi", max_tokens=50), record))
            while len(record.content_ns) < 3:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return record
    with SageMakerTestServer(ServerConfig(itl_s=0.02, coalesce=0.0)) as paced:
        record = asyncio.run(asyncio.wait_for(go(paced.url), 20))
    assert record.error_type is None and 3 <= record.output_tokens < 50


# --------------------------------------------------------------------------- errors as data

@pytest.mark.parametrize("endpoint, error_type", [
    ("throttled", "ThrottlingException"), ("internal", "InternalFailure"),
    ("unavailable", "ServiceUnavailable"), ("model-error-late", "ModelError"),
    ("missing-late", "ValidationError")])
def test_errors_before_the_stream(server, endpoint, error_type):
    for stream in (True, False):
        record, _ = run_one(endpoint, server.url, RequestOptions(stream=stream))
        assert record.error_type == error_type and record.output_tokens == 0
        assert "\n" not in record.error_message
    if error_type == "ModelError":
        assert "OriginalStatusCode=400" in record.error_message
        assert LOG_STREAM_ARN in record.error_message and "bad request" in record.error_message


@pytest.mark.parametrize("endpoint, error_type, message", [
    ("stream-model-error", "ModelStreamError", "ModelInvocationTimeExceeded: "),
    ("stream-internal-failure", "InternalStreamFailure", "Internal stream failure"),
    ("stream-error-frame", "InternalServerError", "stream broke"),
    ("stream-bad-crc", "crc_mismatch", "CRC32"),
    ("stream-truncated", "truncated_frame", "incomplete frame")])
def test_mid_stream_failures_keep_tokens(server, endpoint, error_type, message):
    record, _ = run_one(endpoint, server.url, RequestOptions(keep_text=True))
    assert record.error_type == error_type and message in record.error_message
    assert record.output_tokens == FAULT_AFTER and record.text == expected_text(FAULT_AFTER)
    assert len(record.content_ns) == FAULT_AFTER and record.end_ns >= record.content_ns[-1]


# --------------------------------------------------------------------------- preflight

def test_preflight_unknown_endpoint(server):
    with pytest.raises(TargetError, match="Endpoint missing of account .* not found"):
        open_only("missing", server.url)


def test_preflight_model_error(server):
    with pytest.raises(TargetError, match="ModelError.*OriginalStatusCode=400"):
        open_only("model-error", server.url)


def test_preflight_rejected_signature(server, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
    with pytest.raises(AuthError, match="InvalidSignatureException") as info:
        open_only("openai", server.url)
    assert "wrong-secret-value" not in str(info.value) and "\n" not in str(info.value)


def test_preflight_unknown_access_key(server, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSOMEONEELSE")
    with pytest.raises(AuthError, match="UnrecognizedClientException") as info:
        open_only("openai", server.url)
    assert "AKIDSOMEONEELSE" not in str(info.value)


def test_preflight_wrong_region_scope(server):
    with pytest.raises(AuthError, match="InvalidSignatureException"):
        open_only("openai", server.url, region="eu-west-1")


def test_preflight_no_credentials(monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(AuthError, match="no AWS credentials found: set AWS_ACCESS_KEY_ID"):
        open_only("openai", "http://127.0.0.1:9")


def test_preflight_no_region(monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigError, match="no AWS region: pass --region"):
        open_only("openai", None)


def test_preflight_connection_refused():
    with pytest.raises(TargetError, match="cannot reach .*127.0.0.1:9.*--endpoint-url"):
        open_only("openai", "http://127.0.0.1:9")


def test_preflight_wrong_payload_format_is_explained(server):
    with pytest.raises(TargetError, match="bad_json.*--payload-format"):
        open_only("openai", server.url, payload_format="lmi")


def test_default_endpoint_url_comes_from_botocore():
    target = SageMakerTarget("my-endpoint", RequestOptions(), region="eu-central-1")
    aws = setup_aws(botocore.session.get_session(), "eu-central-1", None)
    assert aws.endpoint_url == "https://runtime.sagemaker.eu-central-1.amazonaws.com"
    assert setup_aws(botocore.session.get_session(), "cn-north-1", None).endpoint_url.endswith(
        "amazonaws.com.cn")
    assert target.describe()["region"] == "eu-central-1"


# --------------------------------------------------------------------------- construction

def test_from_url():
    target = SageMakerTarget.from_url("sagemaker://my-ep?region=us-east-2", RequestOptions(),
                                      payload_format="openai")
    assert target.endpoint_name == "my-ep" and target.describe()["region"] == "us-east-2"
    same = SageMakerTarget.from_url("sagemaker://my-ep?region=us-east-2", RequestOptions(),
                                    region="us-east-2")
    assert same.describe()["region"] == "us-east-2"
    for bad, problem in [("sagemaker://my-ep?region=a", "conflicting regions"),
                         ("sagemaker://my-ep?model=x", "unknown option"),
                         ("sagemaker://bad_name", "bad SageMaker endpoint name"),
                         ("sagemaker://", "bad SageMaker target"),
                         ("sagemaker://a/b", "bad SageMaker target")]:
        with pytest.raises(ConfigError, match=problem):
            SageMakerTarget.from_url(bad, RequestOptions(), region="b")
    with pytest.raises(ConfigError, match="unknown payload format"):
        SageMakerTarget("ep", RequestOptions(), payload_format="json")
    with pytest.raises(ConfigError, match="1024 ASCII"):
        SageMakerTarget("ep", RequestOptions(), custom_attributes="x" * 1025)


# --------------------------------------------------------------------------- credentials

def test_signer_refreshes_credentials_in_the_background():
    refreshed = []

    def refresh():
        refreshed.append(True)
        return {"access_key": "AKIDNEW", "secret_key": "new", "token": None,
                "expiry_time": "2999-01-01T00:00:00Z"}
    credentials = RefreshableCredentials.create_from_metadata(
        {"access_key": "AKIDOLD", "secret_key": "old", "token": None,
         "expiry_time": "2000-01-01T00:00:00Z"},  # already inside the refresh window
        refresh_using=refresh, method="test")

    async def go():
        signer = RequestSigner(credentials, ReadOnlyCredentials("AKIDOLD", "old", None), REGION)
        first = signer.sign("https://example.com/x", b"{}", {})
        await signer.aclose()  # wait for the background refresh
        second = signer.sign("https://example.com/x", b"{}", {})
        return first["Authorization"], second["Authorization"]
    first, second = asyncio.run(go())
    assert refreshed and "Credential=AKIDNEW/" in second and "Credential=AKIDNEW/" not in first


# --------------------------------------------------------------------------- the server itself

def test_server_speaks_the_real_protocol_to_boto3(server):
    """boto3's own client accepts the test server's frames, signatures and errors."""
    client = boto3.session.Session().client("sagemaker-runtime", endpoint_url=server.url)
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="openai", Body=json.dumps({"max_tokens": 5}), ContentType="application/json")
    assert response["ContentType"] == "text/event-stream"
    data = b"".join(event["PayloadPart"]["Bytes"] for event in response["Body"])
    assert data == b"".join(stream_events("openai", 5))
    response = client.invoke_endpoint_with_response_stream(
        EndpointName="stream-model-error", Body=json.dumps({"max_tokens": 5}))
    with pytest.raises(botocore.exceptions.EventStreamError, match="ModelStreamError"):
        list(response["Body"])
    with pytest.raises(client.exceptions.ModelError) as info:
        client.invoke_endpoint(EndpointName="model-error", Body=b"{}")
    assert info.value.response["OriginalStatusCode"] == 400
    bad = boto3.session.Session().client("sagemaker-runtime", endpoint_url=server.url,
                                          aws_secret_access_key="nope",
                                          aws_access_key_id=ACCESS_KEY)
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidSignatureException"):
        bad.invoke_endpoint(EndpointName="openai", Body=b"{}")


@pytest.mark.parametrize("token", [None, "session-token-value"])
@pytest.mark.parametrize("url", [
    "https://runtime.sagemaker.us-east-2.amazonaws.com/endpoints/my-ep/invocations-response-stream",
    "http://127.0.0.1:8080/endpoints/a-1/invocations"])
def test_our_sigv4_equals_botocores(monkeypatch, token, url):
    import datetime

    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import ReadOnlyCredentials

    from loadgen.targets.sagemaker_aws import host_header, sigv4_headers

    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token)
    when = datetime.datetime(2026, 12, 1, 23, 59, 58)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: when)
    body = b'{"messages": [{"role": "user", "content": "caf\xc3\xa9  x"}], "max_tokens": 3}'
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity",
               "X-Amzn-SageMaker-Custom-Attributes": "a=1   b=2",
               "X-Amzn-SageMaker-Inference-Component": "ic-1", "User-Agent": "not-signed"}
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    request.headers["Host"] = host_header(url)
    botocore.auth.SigV4Auth(credentials, "sagemaker", "us-east-2").add_auth(request)
    ours = sigv4_headers(credentials, "us-east-2", url, body, headers,
                         amz_date=when.strftime("%Y%m%dT%H%M%SZ"))
    assert ours == dict(request.headers.items())
