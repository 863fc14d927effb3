"""The SSE decoder: any split of the bytes gives the same events."""

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.codecs.sse import SSEDecoder


def decode_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    dec = SSEDecoder()
    events, last = [], 0
    for cut in sorted(set(cuts)):
        events += dec.feed(data[last:cut])
        last = cut
    events += dec.feed(data[last:])
    return events + dec.close()


def sse_stream(payloads: list[str], crlf: bool, space: bool, comments: bool) -> bytes:
    nl = "\r\n" if crlf else "\n"
    out = []
    for i, p in enumerate(payloads):
        if comments and i % 2 == 0:
            out.append(f": keep-alive{nl}")
        out.append(f"data:{' ' if space else ''}{p}{nl}{nl}")
    return "".join(out).encode()


payload_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                              blacklist_characters="\r\n"), max_size=20)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(payload_text, min_size=1, max_size=8), crlf=st.booleans(),
       space=st.booleans(), comments=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_any_split_yields_same_events(texts, crlf, space, comments, cuts):
    payloads = [orjson.dumps({"choices": [{"delta": {"content": t}}]}).decode() for t in texts]
    data = sse_stream(payloads, crlf, space, comments)
    cuts = [c % (len(data) + 1) for c in cuts]
    events = decode_in_pieces(data, cuts)
    assert [orjson.loads(e)["choices"][0]["delta"]["content"] for e in events] == texts


def test_split_inside_utf8_character():
    data = 'data: {"t": "héllo ✓"}\n\n'.encode()
    cut = data.index("✓".encode()) + 1  # inside the 3-byte character
    dec = SSEDecoder()
    assert dec.feed(data[:cut]) == []
    assert orjson.loads(dec.feed(data[cut:])[0]) == {"t": "héllo ✓"}


def test_several_events_in_one_read_and_done():
    dec = SSEDecoder()
    assert dec.feed(b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n") == [b"1", b"2", b"[DONE]"]


def test_stream_that_ends_without_blank_line_is_flushed_on_close():
    dec = SSEDecoder()
    assert dec.feed(b"data: {\"a\": 1}") == []
    assert dec.close() == [b'{"a": 1}']
    assert dec.close() == []


def test_comments_fields_and_multiline_data():
    dec = SSEDecoder()
    events = dec.feed(b": ping\nevent: message\nid: 7\ndata: a\ndata: b\n\n:\n\n")
    assert events == [b"a\nb"]
