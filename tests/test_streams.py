"""OpenAI stream parsing: TTFT chunk choice, token counting, errors, truncation."""

import orjson

from loadgen.codecs.openai_stream import OpenAIStreamParser, parse_openai_body
from loadgen.record import (
    TOKENS_ESTIMATED,
    TOKENS_FROM_CONTINUOUS_USAGE,
    TOKENS_FROM_USAGE,
    RequestRecord,
)


def chunk(obj) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ROLE = chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})


def content(text, finish=None, usage=None):
    obj = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 3, "completion_tokens": usage, "total_tokens": usage + 3}
    return chunk(obj)


def final_usage(n):
    return chunk({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}})


def run(pieces, keep_text=True):
    rec = RequestRecord(intended_ns=0, start_ns=0)
    parser = OpenAIStreamParser(rec, keep_text)
    for t, piece in pieces:
        parser.feed(piece, t)
    parser.close(999)
    return rec


def test_role_chunk_does_not_count_as_first_token():
    rec = run([(10, ROLE), (20, content("Hi")), (30, content("!", "stop")),
               (31, final_usage(2)), (32, b"data: [DONE]\n\n")])
    assert rec.content_ns == [20, 30]
    assert rec.output_tokens == 2 and rec.tokens_source == TOKENS_FROM_USAGE
    assert rec.text == "Hi!" and rec.server_input_tokens == 3 and rec.ok


def test_usage_beats_chunk_count():
    rec = run([(10, ROLE), (20, content("ab")), (30, content("cd", "length")),
               (31, final_usage(4)), (32, b"data: [DONE]\n\n")])
    assert rec.output_tokens == 4 and len(rec.content_ns) == 2


def test_continuous_usage_counts_several_tokens_per_chunk():
    rec = run([(10, ROLE), (20, content("ab", usage=2)), (30, content("cde", "stop", usage=5)),
               (32, b"data: [DONE]\n\n")])
    assert rec.output_tokens == 5 and rec.tokens_source == TOKENS_FROM_CONTINUOUS_USAGE


def test_no_usage_is_flagged_estimated():
    rec = run([(20, content("a")), (30, content("b")), (40, content("c", "stop")),
               (41, b"data: [DONE]\n\n")])
    assert rec.output_tokens == 3 and rec.tokens_source == TOKENS_ESTIMATED


def test_completions_text_stream():
    rec = run([(20, chunk({"object": "text_completion", "choices": [{"text": "x"}]})),
               (30, chunk({"choices": [{"text": "y", "finish_reason": "length"}]})),
               (40, b"data: [DONE]\n\n")])
    assert rec.content_ns == [20, 30] and rec.text == "xy"


def test_error_object_mid_stream_fails_the_request_but_keeps_tokens():
    rec = run([(20, content("a")), (30, chunk({"error": {"message": "boom", "code": 500}}))])
    assert rec.error_type == "stream_error" and "boom" in rec.error_message
    assert rec.output_tokens == 1


def test_stream_ending_without_done_or_finish_is_truncated():
    rec = run([(20, content("a")), (30, content("b"))])
    assert rec.error_type == "truncated_stream"
    assert rec.output_tokens == 2


def test_stream_with_finish_reason_but_no_done_is_ok():
    rec = run([(20, content("a")), (30, content("b", "stop"))])
    assert rec.ok


def test_cut_short_keeps_tokens_without_judging_the_end():
    rec = RequestRecord()
    parser = OpenAIStreamParser(rec)
    parser.feed(content("a") + content("b"), 5)
    rec.fail("disconnected", "server went away", 6)
    parser.close(7, cut_short=True)
    assert rec.error_type == "disconnected" and rec.output_tokens == 2


def test_non_streaming_body():
    rec = RequestRecord()
    body = orjson.dumps({"choices": [{"message": {"content": "hello"}}],
                         "usage": {"prompt_tokens": 4, "completion_tokens": 7}})
    parse_openai_body(rec, body, 50, keep_text=True)
    assert rec.content_ns == [50] and rec.end_ns == 50
    assert rec.output_tokens == 7 and rec.text == "hello" and rec.server_input_tokens == 4
