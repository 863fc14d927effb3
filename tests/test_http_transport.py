"""The streaming HTTP transport: same records as aiohttp for the same bytes, however split.

Pure tests feed :class:`ResponseReader` a raw response cut at arbitrary offsets; live tests
send the same bytes from a scripted server on 127.0.0.1 through both transports.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.codecs.http1 import RequestHead, ResponseReader
from loadgen.codecs.openai_response import OpenAIResponse
from loadgen.codecs.openai_stream import OpenAIStreamParser
from loadgen.config import RequestOptions
from loadgen.record import Prompt, RequestRecord
from loadgen.targets.base import open_target
from loadgen.targets.openai_http import OpenAIHTTPTarget
from tests.helpers.raw_http_server import RawServer, Script, chunked, sse_head

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=4)


def sse_body(texts: list[str], eol: bytes, ending: str) -> bytes:
    """vLLM-shaped chat chunks; ``ending``: ``done`` (finish + usage + [DONE]), ``error``
    (an error event after the first token), or ``cut`` (no end at all)."""
    events = []
    for i, text in enumerate(texts):
        finish = "length" if ending == "done" and i == len(texts) - 1 else None
        events.append({"choices": [{"index": 0, "delta": {"content": text},
                                    "finish_reason": finish}]})
        if ending == "error" and i == 0:
            events.append({"error": {"message": "boom", "code": 500}})
    if ending == "done":
        events.append({"choices": [], "usage": {"prompt_tokens": 3,
                                                "completion_tokens": len(texts)}})
    body = b"".join(b"data: " + orjson.dumps(e) + eol + eol for e in events)
    return body + (b"data: [DONE]" + eol + eol if ending == "done" else b"")


def outcome(record: RequestRecord) -> tuple:
    return (record.error_type, record.output_tokens, record.tokens_source, record.text,
            len(record.content_ns))


def reference(body: bytes) -> tuple:
    """The stream parser fed the whole body at once: what any transport must reproduce."""
    record = RequestRecord()
    parser = OpenAIStreamParser(record, keep_text=True)
    parser.feed(body, 1)
    parser.close(2)
    return outcome(record)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


def read_response(pieces: list[bytes], eof: bool = False) -> RequestRecord:
    record = RequestRecord()
    handler = OpenAIResponse(record, stream=True, keep_text=True)
    reader = ResponseReader()
    reader.begin(handler)
    for i, piece in enumerate(pieces):
        reader.feed(piece, 10 + i)
    if eof:
        assert reader.end_of_stream(99) or reader.complete
    return record


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(TEXT, min_size=1, max_size=6), crlf=st.booleans(),
       ending=st.sampled_from(["done", "error"]),
       framing=st.sampled_from(["chunked", "length", "eof"]),
       body_cuts=st.lists(st.integers(0, 10_000), max_size=6),
       read_cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_reader_gives_the_parsers_record_for_any_split(texts, crlf, ending, framing, body_cuts,
                                                       read_cuts):
    body = sse_body(texts, b"\r\n" if crlf else b"\n", ending)
    if framing == "chunked":  # HTTP chunk boundaries fall anywhere, mid-event included
        raw = sse_head("chunked") + chunked(split(body, body_cuts))
    elif framing == "length":
        raw = sse_head(f"length:{len(body)}") + body
    else:
        raw = sse_head("eof") + body
    record = read_response(split(raw, read_cuts), eof=framing == "eof")
    assert outcome(record) == reference(body)


def test_reader_handles_interim_responses_and_errors_with_messages():
    record = read_response([b"HTTP/1.1 100 Continue\r\n\r\n",
                            b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 37\r\n\r\n",
                            b'{"error": {"message": "slow down!"}}\n'])
    assert (record.error_type, record.error_message) == ("http_429", "slow down!")


def test_json_answer_to_a_streaming_request_is_named():
    body = b'{"choices": [{"message": {"content": "hi"}}]}'
    record = read_response([b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)])
    assert record.error_type == "unexpected_content_type"
    assert "application/json" in record.error_message


def test_request_head_is_built_once_and_rejects_header_injection():
    head = RequestHead("POST", "/v1/chat/completions", "h:1", {"Authorization": "Bearer k"})
    assert head.render(b"{}", 7) == (b"POST /v1/chat/completions HTTP/1.1\r\nHost: h:1\r\n"
                                     + b"User-Agent: " + head.render(b"", None).split(
                                         b"User-Agent: ")[1].split(b"\r\n")[0]
                                     + b"\r\nAuthorization: Bearer k\r\nContent-Length: 2\r\n"
                                     b"X-Request-Id: 7\r\n\r\n{}")
    with pytest.raises(ValueError):
        RequestHead("POST", "/", "h", {"X": "a\r\nEvil: 1"})


# ------------------------------------------------------------------ live, both transports

async def _send_each(url: str, transport: str, count: int) -> list[RequestRecord]:
    options = RequestOptions(transport=transport, keep_text=True)
    records = []
    async with open_target(OpenAIHTTPTarget(url, options, pool_size=1)) as target:
        for _ in range(count):
            record = RequestRecord()
            await target.send(Prompt("hi", max_tokens=8), record)
            records.append(record)
    return records


def _scripts(texts: list[str], crlf: bool, ending: str, framing: str,
             body_cuts: list[int]) -> tuple[Script, bytes]:
    body = sse_body(texts, b"\r\n" if crlf else b"\n", ending)
    if framing == "chunked":
        return Script((sse_head("chunked"), *split(chunked(split(body, body_cuts)),
                                                     body_cuts))), body
    if framing == "truncated":  # the server dies in the middle of a chunk
        wire = chunked([body])
        return Script((sse_head("chunked"), wire[:len(wire) // 2]), close=True), body
    return Script((sse_head("eof"), *split(body, body_cuts)), close=True), body


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXT, min_size=1, max_size=5), crlf=st.booleans(),
       ending=st.sampled_from(["done", "error"]),
       framing=st.sampled_from(["chunked", "eof", "truncated"]),
       body_cuts=st.lists(st.integers(0, 5_000), max_size=4))
def test_both_transports_give_the_same_records(texts, crlf, ending, framing, body_cuts):
    script, body = _scripts(texts, crlf, ending, framing, body_cuts)
    results = {}
    for transport in ("stream", "aiohttp"):
        with RawServer() as server:
            server.script(script)
            (record,) = asyncio.run(asyncio.wait_for(_send_each(server.url, transport, 1), 20))
        results[transport] = outcome(record)
    assert results["stream"] == results["aiohttp"]
    if framing == "truncated":  # the first failure wins: an error event sent before the cut
        assert results["stream"][0] in (("disconnected",) if ending == "done"
                                        else ("disconnected", "stream_error"))
    else:
        assert results["stream"] == reference(body)


def test_a_reused_connection_closed_under_a_request_is_retried_not_failed():
    body = sse_body(["a", "b"], b"\n", "done")
    ok = Script((sse_head("chunked"), chunked([body])))
    for transport in ("stream", "aiohttp"):
        with RawServer() as server:
            # The first answer leaves the connection open, then the server drops it without
            # answering the second request; the retry gets a fresh connection.
            server.script(ok, Script((), close=True), ok)
            records = asyncio.run(asyncio.wait_for(_send_each(server.url, transport, 2), 20))
            assert [r.error_type for r in records] == [None, None], transport
            assert server.posts == 3


def _self_signed(tmp_path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, written as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(
                ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def test_https_goes_through_asyncios_tls_and_verifies_the_certificate(tmp_path):
    import json
    import os
    import ssl
    import subprocess
    import sys

    cert_file, key_file = _self_signed(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)
    body = sse_body(["x", "y"], b"\n", "done")
    out = tmp_path / "r.json"
    with RawServer(server_context) as server:
        assert server.url.startswith("https://")
        server.script(Script((sse_head("chunked"), chunked([body]))))
        # Trusted through the standard OpenSSL variable (read when the process starts): the
        # client verifies the certificate, it never skips verification.
        done = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--target", server.url,
                               "--requests", "1", "--server-metrics-interval", "0",
                               "--out", str(out)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "SSL_CERT_FILE": cert_file})
        assert done.returncode == 0, done.stderr
        level = json.loads(out.read_text())["levels"][0]
        assert level["requests"]["completed"] == 1 and level["output_tokens"] == 2
        # Without the certificate trusted, the same target is refused in one line.
        refused = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--target",
                                  server.url, "--requests", "1"], capture_output=True, text=True,
                                 timeout=60, env={**os.environ, "SSL_CERT_FILE": ""})
        assert refused.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
