import json

import pytest

from warren import SSEDecoder, parse_sse
from warren._sse import decode_output, parse_event_json

STREAM = (
    b'data: {"type":"start","pid":7}\n\n'
    b": keepalive\n\n"
    b'data: {"type":"stdout","data":"h\xc3\xa9llo\\n"}\n\n'
    b'data: {"type":"stdout","data_base64":"//4="}\n\n'
    b'data: {"type":"complete","exit_code":0,"duration_ms":3,"timed_out":false}\n\n'
)


def types(events):
    return [json.loads(e.data)["type"] for e in events]


def test_whole_stream():
    evs = list(parse_sse([STREAM]))
    assert types(evs) == ["start", "stdout", "stdout", "complete"]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_any_chunking_gives_the_same_events(size):
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    dec = SSEDecoder()
    evs = []
    for c in chunks:
        evs.extend(dec.feed(c))
    evs.extend(dec.flush())
    assert [e.data for e in evs] == [e.data for e in parse_sse([STREAM])]
    assert dec.comments == 1
    # A UTF-8 character split across chunks is decoded whole.
    assert json.loads(evs[1].data)["data"] == "héllo\n"


def test_every_split_point_of_crlf_streams():
    crlf = STREAM.replace(b"\n", b"\r\n")
    cr = STREAM.replace(b"\n", b"\r")
    for s in (crlf, cr):
        for cut in range(len(s)):
            dec = SSEDecoder()
            evs = dec.feed(s[:cut]) + dec.feed(s[cut:]) + dec.flush()
            assert types(evs) == ["start", "stdout", "stdout", "complete"], cut


def test_comments_only_and_keepalives_yield_nothing():
    dec = SSEDecoder()
    assert dec.feed(b": keepalive\n\n: keepalive\n\n") == []
    assert dec.comments == 2


def test_multiline_data_event_id_and_retry():
    evs = list(parse_sse([b"event: progress\nid: 4\nretry: 100\ndata: a\ndata: b\n\n"]))
    assert len(evs) == 1
    assert (evs[0].data, evs[0].event, evs[0].id, evs[0].retry) == ("a\nb", "progress", "4", 100)


def test_data_without_space_and_bom_and_unterminated_tail():
    evs = list(parse_sse([b'\xef\xbb\xbfdata:{"type":"x"}\n\ndata: {"type":"lost"}']))
    # The last event never got its blank line: discarded, as the format says.
    assert types(evs) == ["x"]


def test_event_json_and_output_decoding():
    ev = next(iter(parse_sse([b'data: {"type":"stdout","data_base64":"AP8Q"}\n\n'])))
    obj = parse_event_json(ev)
    assert decode_output(obj) == b"\x00\xff\x10"
    assert decode_output({"data": "é"}) == "é".encode()
    from warren import WarrenStreamError

    bad = next(iter(parse_sse([b"data: not json\n\n"])))
    with pytest.raises(WarrenStreamError):
        parse_event_json(bad)
