import pytest

"""Event-stream frames: the test encoder against botocore's decoder, and EventStreamReader.

EventStreamReader turns frames into payload-parser input; exception and error frames,
CRC mismatches and truncated frames fail the record while keeping the tokens parsed.
"""

import binascii
import struct

from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.codecs.event_stream import EventStreamReader, FrameSplitter
from loadgen.codecs.sagemaker_formats import make_stream_parser
from loadgen.record import TOKENS_FROM_USAGE, RequestRecord
from tests.helpers.sagemaker_server import (
    encode_message,
    error_frame,
    exception_frame,
    expected_text,
    payload_part,
    stream_events,
)

pytestmark = pytest.mark.integration  # starts servers, processes or an emulator


def read(frames: bytes, reads: list[bytes] | None = None, payload_format: str = "openai"):
    record = RequestRecord()
    reader = EventStreamReader(record, make_stream_parser(payload_format, record, True))
    for index, chunk in enumerate(reads if reads is not None else [frames]):
        reader.feed(chunk, 1000 + index)
    reader.close(9999)
    return record, reader


def openai_frames(n_tokens: int) -> bytes:
    """One PayloadPart per engine step, as SageMaker usually sends them."""
    return b"".join(payload_part(step) for step in stream_events("openai", n_tokens))


def test_encoder_matches_botocore_decoder():
    message = encode_message({":message-type": "event", ":event-type": "PayloadPart",
                              "x-ünïcode": "välue"}, b"\x00payload\xff")
    buffer = EventStreamBuffer()
    buffer.add_data(message)
    decoded = list(buffer)
    assert len(decoded) == 1
    assert decoded[0].headers == {":message-type": "event", ":event-type": "PayloadPart",
                                  "x-ünïcode": "välue"}
    assert decoded[0].payload == b"\x00payload\xff"
    assert decoded[0].prelude.total_length == len(message)


def test_exception_frame_decodes_in_botocore():
    buffer = EventStreamBuffer()
    buffer.add_data(exception_frame("ModelStreamError", {"Message": "m", "ErrorCode": "E"}))
    (message,) = list(buffer)
    assert message.to_response_dict()["status_code"] == 400
    assert message.headers[":exception-type"] == "ModelStreamError"


def test_frames_to_tokens():
    record, reader = read(openai_frames(5))
    assert record.ok and record.text == expected_text(5)
    assert record.output_tokens == 5 and record.tokens_source == TOKENS_FROM_USAGE
    assert not reader.broken


def test_events_completed_in_one_read_share_its_timestamp():
    frames = [payload_part(step) for step in stream_events("openai", 4)]
    record, _ = read(b"", reads=[frames[0][:5], frames[0][5:] + frames[1], frames[2] + frames[3]])
    assert record.content_ns == [1001, 1001, 1002, 1002]


@settings(max_examples=50, deadline=None)
@given(n_tokens=st.integers(1, 10), offsets=st.lists(st.integers(0, 100_000), max_size=30))
def test_any_split_of_the_frame_bytes_gives_the_same_result(n_tokens, offsets):
    data = openai_frames(n_tokens)
    cuts = sorted({offset % (len(data) + 1) for offset in offsets})
    reads = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    record, _ = read(data, reads)
    assert record.ok and record.text == expected_text(n_tokens)
    assert record.output_tokens == n_tokens and len(record.content_ns) == n_tokens


def test_model_stream_error_keeps_error_code_and_tokens():
    steps = stream_events("openai", 6)
    frames = b"".join(payload_part(step) for step in steps[:2])
    frames += exception_frame("ModelStreamError", {"Message": "Model invocation time exceeded",
                                                   "ErrorCode": "ModelInvocationTimeExceeded"})
    frames += payload_part(steps[2])  # anything after the exception is ignored
    record, reader = read(frames)
    assert record.error_type == "ModelStreamError"
    assert record.error_message == "ModelInvocationTimeExceeded: Model invocation time exceeded"
    assert record.output_tokens == 2 and record.text == expected_text(2) and reader.broken


def test_internal_stream_failure_and_error_frames():
    first = payload_part(stream_events("openai", 3)[0])
    record, _ = read(first + exception_frame("InternalStreamFailure", {"Message": "boom"}))
    assert (record.error_type, record.error_message, record.output_tokens) == (
        "InternalStreamFailure", "boom", 1)
    record, _ = read(first + error_frame("ThrottlingException", "slow down"))
    assert (record.error_type, record.error_message) == ("ThrottlingException", "slow down")


def test_crc_mismatch_fails_with_clear_type():
    good = payload_part(stream_events("openai", 3)[0])
    bad = payload_part(b"data: {}\n\n")
    bad = bad[:-4] + struct.pack("!I", struct.unpack("!I", bad[-4:])[0] ^ 1)
    record, reader = read(good + bad + good)
    assert record.error_type == "crc_mismatch" and "CRC32" in record.error_message
    assert record.output_tokens == 1 and reader.broken


def test_corrupt_prelude_fails_with_crc_mismatch():
    frame = bytearray(payload_part(b"data: {}\n\n"))
    frame[2] ^= 0xFF  # total length no longer matches the prelude CRC
    record, _ = read(bytes(frame))
    assert record.error_type == "crc_mismatch"


def test_truncated_last_frame():
    frames = openai_frames(3)
    record, _ = read(frames[:-7])
    assert record.error_type == "truncated_frame" and "incomplete frame" in record.error_message
    # Every complete frame before the cut was parsed; the cut one held token 3 and usage.
    assert record.output_tokens == 2 and record.text == expected_text(2)


def test_cut_short_transport_does_not_add_a_frame_error():
    frames = openai_frames(3)
    record = RequestRecord()
    reader = EventStreamReader(record, make_stream_parser("openai", record, True))
    reader.feed(frames[:-7], 1)
    reader.close(2, cut_short=True)
    assert record.error_type is None and record.output_tokens == 2


def test_unknown_header_type_is_a_bad_frame():
    frame = bytearray(payload_part(b"x"))
    frame[12 + 1 + len(":event-type")] = 42  # the first header's value type
    # Re-seal both CRCs so only the header type is wrong.
    body = bytes(frame[:-4])
    frame = body + struct.pack("!I", binascii.crc32(body))
    record, _ = read(frame, payload_format="raw")
    assert record.error_type == "bad_frame"


def botocore_frames(data: bytes) -> list[tuple[dict, bytes]] | str:
    """The oracle: botocore's own decoder, or the name of the error it raised."""
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    try:
        return [(dict(m.headers), m.payload) for m in buffer]
    except Exception as err:  # noqa: BLE001 - the oracle's error type is the result
        return type(err).__name__


def splitter_frames(pieces: list[bytes]) -> list[tuple[dict, bytes]] | str:
    splitter = FrameSplitter()
    frames = []
    try:
        for piece in pieces:
            frames += [(dict(h), p) for h, p in splitter.feed(piece)]
    except Exception as err:  # noqa: BLE001
        return type(err).__name__
    return frames


FRAME_HEADERS = st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda t: len(t.encode()) < 128),
                                st.text(max_size=20), max_size=3)


@settings(max_examples=150, deadline=None)
@given(frames=st.lists(st.tuples(FRAME_HEADERS, st.binary(max_size=300)), min_size=1, max_size=5),
       cuts=st.lists(st.integers(0, 5000), max_size=8),
       flip=st.one_of(st.none(), st.integers(0, 5000)))
def test_frame_splitter_agrees_with_botocore(frames, cuts, flip):
    data = bytearray(b"".join(encode_message(h, p) for h, p in frames))
    if flip is not None:  # corrupt one byte: both must reject it the same way
        data[flip % len(data)] ^= 0xFF
    data = bytes(data)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in zip(points, points[1:])]
    expected = botocore_frames(data)
    got = splitter_frames(pieces)
    if isinstance(expected, list) and isinstance(got, list):
        assert got == expected
    else:  # both reject (a corrupted length may make either wait for bytes that never come)
        assert isinstance(got, str) or len(got) < len(frames), (got, expected)


def test_header_blocks_are_parsed_once_per_stream():
    splitter = FrameSplitter()
    frames = list(splitter.feed(openai_frames(4)))
    assert len(frames) == 4 and all(h[":event-type"] == "PayloadPart" for h, _ in frames)
    assert frames[0][0] is frames[3][0]  # one distinct header block, parsed once

