"""A SageMaker-runtime test server on 127.0.0.1 (tests and benchmarks) that speaks the real wire format.

- ``POST /endpoints/{name}/invocations-response-stream``: ``application/vnd.amazon.eventstream``
  frames (encoded below with struct + binascii.crc32) whose PayloadParts cut the container's
  body at random (seeded) byte offsets, mid-UTF-8 included, sometimes several events per part.
- ``POST /endpoints/{name}/invocations``: the container's whole JSON body.
- Every request must carry a valid SigV4 signature (recomputed with botocore from the known
  test credentials) for service ``sagemaker``; bad ones get AWS's 403 errors.

The endpoint name selects the behaviour::

    openai | lmi | tgi | raw          a container speaking that payload format
    openai-bare, lmi-bare, tgi-bare   same, without X-Amzn-SageMaker-Content-Type (forces sniffing)
    lmi-chat                          LMI JSON lines carrying OpenAI chat chunks
    missing                           400 ValidationError (endpoint not found)
    model-error                       424 ModelError (OriginalStatusCode, OriginalMessage, ...)
    throttled | internal | unavailable  429 ThrottlingException | 500 InternalFailure | 503
    stream-model-error                ModelStreamError exception frame after FAULT_AFTER tokens
    stream-internal-failure           InternalStreamFailure exception frame after FAULT_AFTER tokens
    stream-error-frame                ``:message-type=error`` frame after FAULT_AFTER tokens
    stream-bad-crc                    a frame with a wrong message CRC after FAULT_AFTER tokens
    stream-truncated                  the body ends inside a frame after FAULT_AFTER tokens
    NAME-late                         requests for one token (preflights) are served as ``openai``,
                                      others as NAME (e.g. ``model-error-late``)

Run standalone (benchmarks): ``python -m tests.helpers.sagemaker_server [--ttft S] [--itl S]`` prints
the port, then serves until stdin closes.
"""

from __future__ import annotations

import asyncio
import binascii
import hmac
import random
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ACCESS_KEY = "AKIDLOADGENTEST0001"
SECRET_KEY = "loadgen-test-secret-key/not-a-real-one"
REGION = "us-west-2"
ACCOUNT = "123456789012"
FAULT_AFTER = 3
# Token texts cycle through multi-byte characters so random cuts land inside them.
TOKEN_TEXTS = ("Hé", "llo", " wörld", " 日本語", " 🙂", " ok", "!", " ñ")
LOG_STREAM_ARN = (f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/Endpoints/"
                  "model-error")


# --------------------------------------------------------------------------- event-stream encoder

def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude, string headers (type 7), payload, CRC32s."""
    header_bytes = b"".join(
        struct.pack("!B", len(name.encode())) + name.encode()
        + struct.pack("!BH", 7, len(value.encode())) + value.encode()
        for name, value in headers.items())
    total_length = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack("!II", total_length, len(header_bytes))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack("!I", binascii.crc32(message))


def payload_part(payload: bytes) -> bytes:
    return encode_message({":event-type": "PayloadPart",
                           ":content-type": "application/octet-stream",
                           ":message-type": "event"}, payload)


def exception_frame(exception_type: str, body: dict[str, Any]) -> bytes:
    return encode_message({":exception-type": exception_type, ":content-type": "application/json",
                           ":message-type": "exception"}, orjson.dumps(body))


def error_frame(code: str, message: str) -> bytes:
    return encode_message({":error-code": code, ":error-message": message,
                           ":message-type": "error"}, b"")


# --------------------------------------------------------------------------- container bodies

def token_text(index: int) -> str:
    return TOKEN_TEXTS[index % len(TOKEN_TEXTS)]


def expected_text(n_tokens: int) -> str:
    return "".join(token_text(i) for i in range(n_tokens))


def stream_events(payload_format: str, n_tokens: int, chat: bool = True,
                  continuous_usage: bool = False) -> list[bytes]:
    """The container's streamed body, one element per engine step (element 0 holds token 0)."""
    if payload_format in ("openai", "lmi-chat"):
        return _openai_events(n_tokens, chat, continuous_usage, sse=payload_format == "openai")
    if payload_format == "raw":
        return [token_text(i).encode() for i in range(n_tokens)]
    steps = []
    for i in range(n_tokens):
        obj: dict[str, Any] = {"token": {"id": 100 + i, "text": token_text(i)}}
        if payload_format == "tgi":
            obj["token"].update(logprob=-0.5, special=False)
            obj.update(generated_text=None, details=None)
        else:
            obj["token"]["log_prob"] = -0.5
        if i == n_tokens - 1:
            obj["generated_text"] = expected_text(n_tokens)
            obj["details"] = {"finish_reason": "length", "generated_tokens": n_tokens}
        line = orjson.dumps(obj)
        steps.append(b"data:" + line + b"\n\n" if payload_format == "tgi" else line + b"\n")
    return steps


def _openai_events(n_tokens: int, chat: bool, continuous_usage: bool, sse: bool) -> list[bytes]:
    def frame(obj: dict[str, Any]) -> bytes:
        data = orjson.dumps(obj)
        return b"data: " + data + b"\n\n" if sse else data + b"\n"

    kind = "chat.completion.chunk" if chat else "text_completion"
    base = {"id": "chatcmpl-test", "object": kind, "created": 1, "model": "test-model"}

    def chunk(text: str, finish: str | None, used: int | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if chat:
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        obj = {**base, "choices": [choice]}
        if continuous_usage and used is not None:
            obj["usage"] = {"prompt_tokens": 5, "completion_tokens": used,
                            "total_tokens": 5 + used}
        return obj

    steps = []
    for i in range(n_tokens):
        step = b""
        if i == 0 and chat:  # vLLM's role-only chunk, sent in the same step as the first token
            step += frame({**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                       "content": ""},
                                                 "logprobs": None, "finish_reason": None}]})
        finish = "length" if i == n_tokens - 1 else None
        step += frame(chunk(token_text(i), finish, i + 1))
        steps.append(step)
    usage = {"prompt_tokens": 5, "completion_tokens": n_tokens, "total_tokens": 5 + n_tokens}
    tail = frame({**base, "choices": [], "usage": usage})
    if sse:
        tail += b"data: [DONE]\n\n"
    if steps:
        steps[-1] += tail
    else:
        steps.append(tail)
    return steps


def whole_body(payload_format: str, n_tokens: int, chat: bool = True) -> tuple[bytes, str]:
    """Non-streaming (InvokeEndpoint) body and its content type."""
    text = expected_text(n_tokens)
    details = {"finish_reason": "length", "generated_tokens": n_tokens}
    if payload_format == "openai":
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        usage = {"prompt_tokens": 5, "completion_tokens": n_tokens, "total_tokens": 5 + n_tokens}
        return orjson.dumps({"id": "cmpl-test", "choices": [choice], "usage": usage}), \
            "application/json"
    if payload_format == "lmi":
        return orjson.dumps({"generated_text": text, "details": details}), "application/json"
    if payload_format == "tgi":
        return orjson.dumps([{"generated_text": text, "details": details}]), "application/json"
    return text.encode(), "text/plain"


# --------------------------------------------------------------------------- cutting into parts

def cut(data: bytes, rng: random.Random, max_cuts: int) -> list[bytes]:
    """Split ``data`` at up to ``max_cuts`` random offsets (any byte, mid-character included)."""
    if len(data) < 2 or max_cuts < 1:
        return [data] if data else []
    offsets = sorted(rng.sample(range(1, len(data)), min(rng.randint(0, max_cuts), len(data) - 1)))
    return [data[a:b] for a, b in zip([0, *offsets], [*offsets, len(data)])]


# --------------------------------------------------------------------------- SigV4 check

def check_signature(request: web.Request, body: bytes) -> tuple[str, str] | None:
    """None when the request is signed with the test credentials for sagemaker, else (code, msg)."""
    auth = request.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "MissingAuthenticationTokenException", "Missing Authentication Token"
    try:
        fields = dict(item.strip().split("=", 1) for item in auth[len("AWS4-HMAC-SHA256 "):]
                      .split(","))
        access_key, date, region, service, terminator = fields["Credential"].split("/")
        signed_headers = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        return "IncompleteSignatureException", "Authorization header is malformed"
    if access_key != ACCESS_KEY:
        return ("UnrecognizedClientException",
                "The security token included in the request is invalid.")
    if service != "sagemaker" or region != REGION or terminator != "aws4_request":
        return ("InvalidSignatureException",
                f"Credential should be scoped to a valid region and service 'sagemaker' "
                f"(got {region}/{service})")
    if "host" not in signed_headers or "x-amz-date" not in signed_headers:
        return "InvalidSignatureException", "host and x-amz-date must be signed"
    headers = {name: request.headers.get(name, "") for name in signed_headers}
    aws_request = AWSRequest(method=request.method, url=f"http://{request.host}{request.raw_path}",
                             data=body, headers=headers)
    aws_request.context["timestamp"] = request.headers.get("X-Amz-Date", "")
    signer = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "sagemaker", REGION)
    expected = signer.signature(signer.string_to_sign(
        aws_request, signer.canonical_request(aws_request)), aws_request)
    if not hmac.compare_digest(expected, signature):
        return ("InvalidSignatureException", "The request signature we calculated does not match "
                "the signature you provided.")
    return None


# --------------------------------------------------------------------------- the server

@dataclass
class ServerConfig:
    ttft_s: float = 0.0  # delay before the first step
    itl_s: float = 0.0  # delay between steps
    seed: int = 0
    max_cuts: int = 3  # random cuts per emitted batch of bytes (0: one part, one write per step)
    coalesce: float = 0.3  # probability of holding a step's bytes back to share a part
    check_signatures: bool = True


_ERRORS = {  # endpoint name -> (status, x-amzn-errortype, body)
    "missing": (400, "ValidationError:http://internal.amazon.com/coral/com.amazon.coral.validate/",
                {"message": f"Endpoint missing of account {ACCOUNT} not found."}),
    "model-error": (424, "ModelError:http://internal.amazon.com/coral/com.amazonaws.sagemaker/",
                    {"ErrorCode": "CLIENT_ERROR_FROM_MODEL", "LogStreamArn": LOG_STREAM_ARN,
                     "Message": "Received client error (400) from primary with message "
                                "\"bad request\". See CloudWatch logs.",
                     "OriginalMessage": "{\"object\":\"error\",\"message\":\"bad request\"}",
                     "OriginalStatusCode": 400}),
    "throttled": (429, "ThrottlingException", {"message": "Rate exceeded"}),
    "internal": (500, "InternalFailure", {"message": "An internal failure occurred."}),
    "unavailable": (503, "ServiceUnavailable", {"message": "Service is unavailable."}),
}
_CONTENT_TYPES = {"openai": "text/event-stream", "tgi": "text/event-stream",
                  "lmi": "application/jsonlines", "lmi-chat": "application/jsonlines",
                  "raw": "text/plain"}


@dataclass
class SageMakerTestServer:
    """Runs the app on its own event loop in a daemon thread. Use as a context manager."""

    config: ServerConfig = field(default_factory=ServerConfig)
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "SageMakerTestServer":
        started = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve(started))
        self._loop.close()

    async def _serve(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(make_app(self.config, self.requests))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        await site.start()
        self.port = runner.addresses[0][1]
        started.set()
        await self._stop.wait()
        await runner.cleanup()


def make_app(config: ServerConfig, requests: list[dict[str, Any]]) -> web.Application:
    app = web.Application()
    counter = iter(range(1 << 62))

    async def invoke(request: web.Request) -> web.StreamResponse:
        name, operation = request.match_info["name"], request.match_info["operation"]
        body = await request.read()
        endpoint = name
        if name.endswith("-late"):
            preflight = _requested_tokens(orjson.loads(body)) == 1
            name = "openai" if preflight else name.removesuffix("-late")
        requests.append({"endpoint": endpoint, "operation": operation, "body": orjson.loads(body),
                         "headers": {k: v for k, v in request.headers.items()
                                     if k.lower() != "authorization"}})
        rejected = check_signature(request, body) if config.check_signatures else None
        if rejected:
            return _error_response(403, rejected[0], {"message": rejected[1]})
        if name in _ERRORS:
            status, error_type, error_body = _ERRORS[name]
            return _error_response(status, error_type, error_body)
        payload = orjson.loads(body)
        n_tokens, chat = _requested_tokens(payload), "prompt" not in payload
        if operation == "invocations":
            body_format = name.removesuffix("-bare")
            if body_format == "lmi-chat" or body_format.startswith("stream-"):
                body_format = "openai"
            data, content_type = whole_body(body_format, n_tokens, chat)
            return web.Response(body=data, content_type=content_type)
        rng = random.Random(config.seed * 1_000_003 + next(counter))
        return await _stream(request, config, rng, name, payload, n_tokens, chat)

    app.router.add_post(r"/endpoints/{name}/{operation:invocations|invocations-response-stream}",
                        invoke)
    return app


def _requested_tokens(payload: dict[str, Any]) -> int:
    parameters = payload.get("parameters") or {}
    return int(payload.get("max_tokens") or parameters.get("max_new_tokens") or 8)


def _error_response(status: int, error_type: str, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json",
                        headers={"x-amzn-ErrorType": error_type,
                                 "x-amzn-RequestId": "00000000-0000-0000-0000-000000000000"})


async def _stream(request: web.Request, config: ServerConfig, rng: random.Random, name: str,
                  payload: dict[str, Any], n_tokens: int, chat: bool) -> web.StreamResponse:
    fault = name if name.startswith("stream-") else None
    payload_format = "openai" if fault else name.removesuffix("-bare")
    continuous = bool((payload.get("stream_options") or {}).get("continuous_usage_stats"))
    steps = stream_events(payload_format, n_tokens, chat, continuous)
    headers = {"Content-Type": "application/vnd.amazon.eventstream",
               "x-Amzn-Invoked-Production-Variant": "AllTraffic"}
    if not name.endswith("-bare"):
        headers["X-Amzn-SageMaker-Content-Type"] = _CONTENT_TYPES[payload_format]
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    await asyncio.sleep(config.ttft_s)
    held = b""
    for index, step in enumerate(steps):
        if index:
            await asyncio.sleep(config.itl_s)
        if fault and index == FAULT_AFTER:
            await _write(response, held and _frames(held, payload_format, rng, config), rng)
            await _write(response, _fault_frame(fault), rng)
            return response
        held += step
        last = index == len(steps) - 1
        if not last and rng.random() < config.coalesce:
            continue  # SageMaker sometimes delivers several events in one part
        await _write(response, _frames(held, payload_format, rng, config), rng,
                     min(2, config.max_cuts))
        held = b""
    await response.write_eof()
    return response


def _frames(data: bytes, payload_format: str, rng: random.Random, config: ServerConfig) -> bytes:
    # Raw payloads have no framing of their own: one part per step keeps them meaningful.
    parts = [data] if payload_format == "raw" else cut(data, rng, config.max_cuts)
    return b"".join(payload_part(part) for part in parts)


async def _write(response: web.StreamResponse, data: bytes, rng: random.Random,
                 max_cuts: int = 2) -> None:
    # Cut the frame bytes too, so frames straddle socket writes.
    for piece in cut(data, rng, max_cuts) if data else []:
        await response.write(piece)


def _fault_frame(fault: str) -> bytes:
    if fault == "stream-model-error":
        return exception_frame("ModelStreamError", {
            "Message": "Model invocation time exceeded",
            "ErrorCode": "ModelInvocationTimeExceeded"})
    if fault == "stream-internal-failure":
        return exception_frame("InternalStreamFailure", {"Message": "Internal stream failure"})
    if fault == "stream-error-frame":
        return error_frame("InternalServerError", "stream broke")
    frame = payload_part(b"data: {}\n\n")
    if fault == "stream-bad-crc":
        return frame[:-4] + struct.pack("!I", (struct.unpack("!I", frame[-4:])[0] ^ 0xFFFF))
    return frame[: len(frame) // 2]  # stream-truncated


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttft", type=float, default=0.0)
    parser.add_argument("--itl", type=float, default=0.0)
    parser.add_argument("--coalesce", type=float, default=0.3)
    parser.add_argument("--max-cuts", type=int, default=3)
    args = parser.parse_args(argv)
    config = ServerConfig(ttft_s=args.ttft, itl_s=args.itl, coalesce=args.coalesce,
                          max_cuts=args.max_cuts)
    with SageMakerTestServer(config) as server:
        print(server.port, flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin


if __name__ == "__main__":
    main(sys.argv[1:])
