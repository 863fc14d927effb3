"""SageMaker payload formats: parsers for openai/lmi/tgi/raw, auto detection, request bodies.

The property tests cut a known container body at arbitrary byte offsets (mid-event,
mid-JSON, mid-UTF-8) and check the parsed tokens, text and counts never change.
"""

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.codecs.sagemaker_formats import (
    AutoStreamParser,
    make_stream_parser,
    parse_body,
    request_body,
    sniff_format,
)
from loadgen.config import RequestOptions
from loadgen.record import TOKENS_ESTIMATED, TOKENS_FROM_USAGE, Prompt, RequestRecord
from tests.helpers.sagemaker_server import expected_text, stream_events, whole_body

N_TOKENS = 7


def body(payload_format: str, n_tokens: int = N_TOKENS) -> bytes:
    return b"".join(stream_events(payload_format, n_tokens))


def parse(payload_format: str, parts: list[bytes], content_type: str | None = None):
    record = RequestRecord()
    parser = make_stream_parser(payload_format, record, True, content_type)
    for index, part in enumerate(parts):
        parser.feed(part, 100 + index)
    parser.close(10_000)
    return record, parser


def split_at(data: bytes, offsets: list[int]) -> list[bytes]:
    cuts = sorted({offset % (len(data) + 1) for offset in offsets})
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def summary(record: RequestRecord) -> tuple:
    return (record.error_type, record.output_tokens, record.tokens_source, record.text,
            len(record.content_ns))


# --------------------------------------------------------------------------- each format whole

def test_openai_sse_counts_usage_and_skips_role_chunk():
    record, _ = parse("openai", [body("openai")])
    assert record.ok and record.text == expected_text(N_TOKENS)
    assert record.output_tokens == N_TOKENS and record.tokens_source == TOKENS_FROM_USAGE
    assert len(record.content_ns) == N_TOKENS  # the role-only chunk is not a content chunk


def test_lmi_json_lines_use_details_generated_tokens():
    record, _ = parse("lmi", [body("lmi")])
    assert record.ok and record.text == expected_text(N_TOKENS)
    assert record.output_tokens == N_TOKENS and record.tokens_source == TOKENS_FROM_USAGE
    assert len(record.content_ns) == N_TOKENS


def test_lmi_without_details_counts_token_lines():
    lines = [orjson.dumps({"token": {"id": i, "text": "x"}}) + b"\n" for i in range(4)]
    lines.append(orjson.dumps({"token": {"id": 9, "text": "y"}, "generated_text": "xxxxy"}) + b"\n")
    record, _ = parse("lmi", lines)
    assert record.ok and record.output_tokens == 5 and record.tokens_source == TOKENS_ESTIMATED


def test_lmi_chat_lines_are_openai_chunks():
    record, _ = parse("lmi", [body("lmi-chat")])
    assert record.ok and record.text == expected_text(N_TOKENS)
    assert record.output_tokens == N_TOKENS and record.tokens_source == TOKENS_FROM_USAGE


def test_lmi_error_line_fails_the_record_and_keeps_tokens():
    good = orjson.dumps({"token": {"id": 1, "text": "a"}}) + b"\n"
    error = orjson.dumps({"token": {"id": -1, "text": "", "special_token": True},
                          "generated_text": "",
                          "details": {"finish_reason": "error", "generated_tokens": None}}) + b"\n"
    record, _ = parse("lmi", [good, good, error])
    assert record.error_type == "stream_error" and record.output_tokens == 2


def test_lmi_stream_without_final_line_is_truncated():
    record, _ = parse("lmi", [orjson.dumps({"token": {"id": 1, "text": "a"}}) + b"\n"])
    assert record.error_type == "truncated_stream" and record.output_tokens == 1


def test_tgi_sse_without_space_and_special_tokens():
    events = stream_events("tgi", 3)
    eos = b'data:{"token":{"id":2,"text":"</s>","logprob":0,"special":true},' \
          b'"generated_text":"x","details":{"finish_reason":"eos_token","generated_tokens":4}}\n\n'
    record, _ = parse("tgi", [b"".join(events[:-1]), eos])
    assert record.ok and record.text == expected_text(2)  # the special EOS token adds no text
    assert record.output_tokens == 4 and len(record.content_ns) == 2


def test_tgi_error_event_fails_the_record():
    events = stream_events("tgi", 5)
    error = b'data:{"error":"CUDA OOM","error_type":"generation"}\n\n'
    record, _ = parse("tgi", [*events[:2], error])
    assert record.error_type == "stream_error" and "CUDA OOM" in record.error_message
    assert record.output_tokens == 2


def test_raw_counts_parts_and_reassembles_utf8():
    data = expected_text(N_TOKENS).encode()
    record, _ = parse("raw", [data[:2], data[2:3], data[3:]])  # "é" is cut after byte 2
    assert record.ok and record.text == expected_text(N_TOKENS)
    assert record.output_tokens == 3 and record.tokens_source == TOKENS_ESTIMATED


def test_cut_short_keeps_tokens_without_judging_the_end():
    data = body("lmi")
    record = RequestRecord()
    parser = make_stream_parser("lmi", record, True)
    parser.feed(data[: len(data) // 2], 1)
    parser.close(2, cut_short=True)
    assert record.error_type is None and record.output_tokens > 0


# --------------------------------------------------------------------------- auto detection

def test_sniff_format_from_first_bytes():
    assert sniff_format(b'{"token"') == "lmi"
    assert sniff_format(b"\n  {") == "lmi"
    assert sniff_format(b"", "application/jsonlines") == "lmi"
    assert sniff_format(b"da") is None  # could still become "data:"
    assert sniff_format(b"data: {\"choi") is None  # first event incomplete
    assert sniff_format(body("openai")) == "openai"
    assert sniff_format(body("tgi")) == "tgi"
    assert sniff_format(b"Hello") == "raw"
    assert sniff_format(b"", final=True) == "raw"
    assert sniff_format(b"data: [DONE]\n\n") == "openai"


def test_auto_replays_held_parts_with_their_own_timestamps():
    data = body("tgi")
    record = RequestRecord()
    parser = AutoStreamParser(record, keep_text=True)
    first_event_end = data.index(b"\n\n") + 2
    parser.feed(data[:3], 11)  # "dat": undecided, held
    assert parser.format is None
    parser.feed(data[3:first_event_end], 22)
    assert parser.format == "tgi"
    parser.feed(data[first_event_end:], 33)
    parser.close(44)
    assert record.content_ns[0] == 22 and record.text == expected_text(N_TOKENS)


@settings(max_examples=60, deadline=None)
@given(payload_format=st.sampled_from(["openai", "lmi", "tgi", "lmi-chat"]),
       n_tokens=st.integers(1, 12),
       offsets=st.lists(st.integers(0, 10_000), max_size=40),
       declared=st.booleans())
def test_any_split_gives_the_same_result(payload_format, n_tokens, offsets, declared):
    data = body(payload_format, n_tokens)
    parts = split_at(data, offsets)
    explicit = "lmi" if payload_format == "lmi-chat" else payload_format
    whole, _ = parse(explicit, [data])
    assert whole.ok and whole.text == expected_text(n_tokens) and whole.output_tokens == n_tokens
    content_type = {"openai": "text/event-stream", "tgi": "text/event-stream"}.get(
        payload_format, "application/jsonlines") if declared else None
    for fmt in (explicit, "auto"):
        record, _ = parse(fmt, parts, content_type)
        assert summary(record) == summary(whole)


@settings(max_examples=40, deadline=None)
@given(n_tokens=st.integers(1, 12), offsets=st.lists(st.integers(0, 10_000), max_size=40))
def test_raw_any_split_keeps_the_text(n_tokens, offsets):
    data = body("raw", n_tokens)
    parts = [part for part in split_at(data, offsets) if part]
    record, _ = parse("raw", parts)
    assert record.ok and record.text == expected_text(n_tokens)
    assert record.output_tokens == len(parts)


# --------------------------------------------------------------------------- whole bodies

def test_parse_body_for_every_format():
    for payload_format in ("openai", "lmi", "tgi", "raw"):
        data, _ = whole_body(payload_format, 5)
        for declared in (payload_format, "auto"):
            record = RequestRecord()
            used = parse_body(declared, record, data, 77, keep_text=True)
            assert record.ok and record.text == expected_text(5), (payload_format, declared)
            assert record.content_ns == [77] and record.end_ns == 77
            assert used == payload_format
            if payload_format != "raw":
                assert record.output_tokens == 5 and record.tokens_source == TOKENS_FROM_USAGE


def test_parse_body_reports_container_errors():
    record = RequestRecord()
    parse_body("lmi", record, b'{"error": "bad input", "code": 424}', 5, keep_text=False)
    assert record.error_type == "server_error" and "bad input" in record.error_message


# --------------------------------------------------------------------------- request bodies

def test_request_bodies():
    prompt = Prompt("Hi", max_tokens=12, min_tokens=12)
    options = RequestOptions(model=None, stream=True)
    openai = request_body("openai", prompt, options)
    assert "model" not in openai and openai["stream"] is True
    assert openai["stream_options"] == {"include_usage": True} and openai["max_tokens"] == 12
    assert request_body("auto", prompt, options) == openai
    assert request_body("openai", prompt, RequestOptions(model="m"))["model"] == "m"
    lmi = request_body("lmi", prompt, options)
    assert lmi == {"inputs": "Hi", "stream": True, "parameters": {
        "max_new_tokens": 12, "details": True, "do_sample": False, "ignore_eos_token": True}}
    tgi = request_body("tgi", prompt, RequestOptions(temperature=0.7, stream=False))
    assert tgi["stream"] is False and "ignore_eos_token" not in tgi["parameters"]
    assert tgi["parameters"]["temperature"] == 0.7 and tgi["parameters"]["do_sample"] is True
