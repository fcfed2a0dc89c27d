"""The sans-IO HTTP/1.1 connection: events from bytes, bounds and their statuses, framing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.edge.h1 import Body, End, H1Connection, Head, Limits, ProtocolError, RequestHead
from smg.edge.h1_write import ResponseWriter

PIPELINE = (
    b"GET /v1/models?limit=2&x=%20 HTTP/1.1\r\nHost: gw\r\nX-Trace: a\r\nx-trace: b\r\n\r\n"
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    b'Content-Length: 11\r\nExpect: 100-continue\r\n\r\n{"a": "b"}\n'
    b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: t\r\n\r\n"
    b"GET /health HTTP/1.0\r\n\r\n"
)


def events(data: bytes | list[bytes], **limits: int) -> list[object]:
    """Events of `data` fed in the given pieces, adjacent body chunks joined, heads as tuples."""
    conn = H1Connection(Limits(**limits))
    out: list[object] = []
    for piece in [data] if isinstance(data, bytes) else data:
        conn.feed(piece)
        while (ev := conn.next_event()) is not None:
            if isinstance(ev, Body) and out and isinstance(out[-1], Body):
                out[-1] = Body(out[-1].data + ev.data)
            elif isinstance(ev, Head):
                h = ev.head
                line = (h.method, h.path, h.query, h.version, tuple(h.headers), h.keep_alive)
                out.append((*line, h.expect_continue, h.chunked, h.content_length))
            else:
                out.append(ev)
    return out


def test_pipelined_requests_come_out_in_order_with_their_bodies() -> None:
    got = events(PIPELINE)
    assert [type(e).__name__ for e in got] == [
        "tuple", "End", "tuple", "Body", "End", "tuple", "Body", "End", "tuple", "End",
    ]  # fmt: skip
    models, _, chat, chat_body, _, comp, comp_body, _, health, _ = got
    assert models[:4] == (b"GET", b"/v1/models", b"limit=2&x=%20", "1.1")
    assert models[5] is True  # HTTP/1.1 keeps alive by default
    assert chat[6:] == (True, False, 11) and chat_body == Body(b'{"a": "b"}\n')
    assert comp[7:] == (True, None) and comp_body == Body(b"hello, world")
    assert health[:4] == (b"GET", b"/health", b"", "1.0")
    assert health[5] is False  # HTTP/1.0 without keep-alive closes


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(PIPELINE)), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(PIPELINE)]
    pieces = [PIPELINE[a:b] for a, b in itertools.pairwise(bounds)]
    assert events(pieces) == events(PIPELINE)


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(min_value=1, max_value=len(PIPELINE)))
def test_byte_at_a_time_and_fixed_sizes_agree(size: int) -> None:
    pieces = [PIPELINE[i : i + size] for i in range(0, len(PIPELINE), size)]
    assert events(pieces) == events(PIPELINE)


def test_header_lookup_is_case_insensitive_and_joins_repeats() -> None:
    conn = H1Connection()
    conn.feed(b"GET / HTTP/1.1\r\nX-Trace: a\r\nx-trace: b\r\nContent-Type: text/x\r\n\r\n")
    ev = conn.next_event()
    assert isinstance(ev, Head)
    assert ev.head.header(b"X-TRACE") == b"a, b"
    assert ev.head.header(b"content-type") == b"text/x"
    assert ev.head.header(b"missing") is None


@pytest.mark.parametrize(
    ("raw", "limits", "status", "code"),
    [
        (b"NOPE\r\n\r\n", {}, 400, "malformed_request"),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", {}, 400, "malformed_request"),
        (b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", {"max_headers": 2}, 431,
         "too_many_headers"),
        (b"GET / HTTP/1.1\r\nA: " + b"x" * 200 + b"\r\n\r\n", {"max_head_bytes": 100}, 431,
         "header_too_large"),
        (b"GET /" + b"x" * 200 + b" HTTP/1.1\r\n\r\n", {"max_head_bytes": 100}, 431,
         "header_too_large"),
        (b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", {"max_body": 10}, 413,
         "body_too_large"),
        (b"GET / HTTP/2.0\r\n\r\n", {}, 505, "http_version_not_supported"),
        (b"GET / HTTP/1.2\r\n\r\n", {}, 505, "http_version_not_supported"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", {}, 501,
         "transfer_encoding_not_implemented"),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", {}, 400,
         "malformed_request"),
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", {},
         400, "malformed_request"),  # a smuggling shape
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
         {}, 400, "malformed_request"),
        (b"GET / HTTP/1.1\nHost: a\n\n", {}, 400, "malformed_request"),  # bare LF
        (b"GET / HTTP/1.1\r\nHost: a\r\n X-Folded: b\r\n\r\n", {}, 400, "malformed_request"),
    ],
)  # fmt: skip
def test_each_bound_and_malformation_has_its_status(
    raw: bytes, limits: dict[str, int], status: int, code: str
) -> None:
    conn = H1Connection(Limits(**limits))
    conn.feed(raw)
    ev = conn.next_event()
    assert isinstance(ev, ProtocolError) and (ev.status, ev.code) == (status, code)
    assert conn.next_event() is None and conn.done and not conn.want_read


def test_content_length_over_the_cap_is_refused_before_any_body_byte() -> None:
    conn = H1Connection(Limits(max_body=10))
    conn.feed(b"POST / HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n")  # no body sent yet
    ev = conn.next_event()
    assert isinstance(ev, ProtocolError) and ev.status == 413


def test_chunked_body_is_counted_as_it_comes() -> None:
    conn = H1Connection(Limits(max_body=10))
    conn.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n")
    assert [type(e) for e in conn.events] == [Head, Body]
    conn.feed(b"5\r\nghijk\r\n")
    assert isinstance(conn.events[-1], ProtocolError) and conn.events[-1].status == 413
    conn.feed(b"0\r\n\r\nGET / HTTP/1.1\r\n\r\n")  # nothing after the error is parsed
    assert len(conn.events) == 3


def test_a_header_block_trickled_without_end_is_cut_at_the_byte_bound() -> None:
    conn = H1Connection(Limits(max_head_bytes=1000))
    conn.feed(b"GET / HTTP/1.1\r\nX-Slow: ")
    for _ in range(20):
        conn.feed(b"y" * 100)  # one header value that never ends
        if conn.done:
            break
    ev = conn.next_event()
    assert isinstance(ev, ProtocolError) and ev.code == "header_too_large"


def test_pipeline_bound_turns_reading_off_until_heads_are_taken() -> None:
    conn = H1Connection(Limits(max_pipeline=2))
    conn.feed(b"GET /1 HTTP/1.1\r\n\r\n")
    assert conn.want_read
    conn.feed(b"GET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n")
    assert conn.queued_heads == 3 and not conn.want_read
    conn.next_event(), conn.next_event()  # head 1 and its end
    assert conn.queued_heads == 2 and not conn.want_read
    conn.next_event(), conn.next_event()
    assert conn.want_read


def test_unread_body_bytes_turn_reading_off() -> None:
    conn = H1Connection(Limits(body_high_water=100))
    conn.feed(b"POST / HTTP/1.1\r\nContent-Length: 300\r\n\r\n" + b"z" * 150)
    assert not conn.want_read
    conn.next_event(), conn.next_event()
    assert conn.want_read and conn.queued_bytes == 0


def test_eof_mid_head_is_a_400_and_eof_between_requests_is_quiet() -> None:
    conn = H1Connection()
    conn.feed(b"GET / HTTP/1.1\r\nHo")
    conn.feed_eof()
    ev = conn.next_event()
    assert isinstance(ev, ProtocolError) and ev.code == "incomplete_request"
    quiet = H1Connection()
    quiet.feed(b"GET / HTTP/1.1\r\n\r\n")
    quiet.feed_eof()
    assert [type(e) for e in quiet.events] == [Head, End] and quiet.done


def _head(raw: bytes) -> RequestHead:
    conn = H1Connection()
    conn.feed(raw)
    ev = conn.next_event()
    assert isinstance(ev, Head)
    return ev.head


@pytest.mark.parametrize(
    ("raw", "keep"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True),
    ],
)
def test_keep_alive_decision_and_connection_header(raw: bytes, keep: bool) -> None:
    w = ResponseWriter(_head(raw))
    out = w.whole(200, [(b"Content-Type", b"text/plain")], b"hi")
    assert out.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n")
    assert out.endswith(b"\r\n\r\nhi")
    assert (b"Connection: close\r\n" in out) is not keep and w.keep_alive is keep


def test_streamed_response_is_chunked_and_http10_stream_closes() -> None:
    w = ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n"))
    out = w.head(200, [(b"Content-Type", b"text/event-stream")]) + w.body(b"data: 1\n\n")
    out += w.body(b"") + w.end()
    assert b"Transfer-Encoding: chunked\r\n" in out
    assert out.endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\n") and w.keep_alive
    old = ResponseWriter(_head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"))
    out = old.head(200) + old.body(b"x") + old.end()
    assert b"chunked" not in out and b"Connection: close" in out and not old.keep_alive


@pytest.mark.parametrize("size", [1, 15, 16, 255, 4095, 4096, 70000])
def test_a_chunk_is_framed_with_its_size_in_hex(size: int) -> None:
    w = ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n"))
    w.head(200)
    data = b"x" * size
    before = w.output
    out = w.body(data)
    assert out == f"{size:x}".encode() + b"\r\n" + data + b"\r\n"
    assert w.output - before == len(out)


def test_head_request_gets_no_body_and_short_body_forces_close() -> None:
    w = ResponseWriter(_head(b"HEAD / HTTP/1.1\r\n\r\n"))
    assert w.whole(200, [], b"hello").endswith(b"Content-Length: 5\r\n\r\n")
    short = ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n"))
    short.head(200, [], 10)
    short.body(b"abc")
    short.end()
    assert not short.keep_alive
    over = ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n"))
    over.head(200, [], 2)
    with pytest.raises(ValueError, match="Content-Length"):
        over.body(b"abc")


def test_header_injection_and_framing_headers_are_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n")).head(200, [(b"X", b"a\r\nSet: b")])
    with pytest.raises(ValueError, match="line break"):  # a tuple (cached once checked) too
        ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n")).head(200, ((b"X\nY", b"1"),))
    ok = ((b"X-Ok", b"1"),)
    for _ in range(2):  # checked, then served from the cache: the same bytes
        out = ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n")).whole(200, ok, b"")
        assert out == b"HTTP/1.1 200 OK\r\nX-Ok: 1\r\nContent-Length: 0\r\n\r\n"
    with pytest.raises(ValueError, match="server's to set"):
        ResponseWriter(_head(b"GET / HTTP/1.1\r\n\r\n")).head(200, [(b"Content-Length", b"1")])


_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
_VALUE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 ;=/.", max_size=30).map(str.strip)


@st.composite
def _request(draw: st.DrawFn) -> tuple[bytes, tuple[object, ...], bytes]:
    """One request's bytes, the head fields it must give, and its body."""
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE"]))
    path = b"/" + draw(_TOKEN).encode()
    query = draw(st.sampled_from([b"", b"a=1", b"x=%20&y"]))
    names = draw(st.lists(_TOKEN, max_size=6, unique_by=str.lower))
    names = [n for n in names if n.lower() not in ("content-length", "transfer-encoding")]
    headers = [(n.encode(), draw(_VALUE).encode()) for n in names]
    body = draw(st.binary(max_size=300))
    chunked = draw(st.booleans()) and bool(body)
    target = path + (b"?" + query if query else b"")
    raw = b"%s %s HTTP/1.1\r\n" % (method, target)
    raw += b"".join(b"%s: %s\r\n" % h for h in headers)
    if chunked:
        raw += b"Transfer-Encoding: chunked\r\n\r\n"
        cuts = sorted(draw(st.lists(st.integers(1, len(body)), max_size=4)))
        for a, b in itertools.pairwise([0, *cuts, len(body)]):
            if b > a:
                raw += b"%x\r\n%s\r\n" % (b - a, body[a:b])
        raw += b"0\r\n\r\n"
    else:
        raw += (b"Content-Length: %d\r\n" % len(body) if body else b"") + b"\r\n" + body
    return raw, (method, path, query, chunked, tuple(headers)), body


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(_request(), min_size=1, max_size=5), st.lists(st.integers(0, 4000), max_size=8))
def test_random_pipelines_in_random_splits_give_each_request_and_body(
    requests: list[tuple[bytes, tuple[object, ...], bytes]], cuts: list[int]
) -> None:
    stream = b"".join(r[0] for r in requests)
    bounds = [0, *sorted(min(c, len(stream)) for c in cuts), len(stream)]
    got = events([stream[a:b] for a, b in itertools.pairwise(bounds)])
    want: list[object] = []
    for _, (method, path, query, chunked, headers), body in requests:
        want.append((method, path, query, chunked, headers))
        if body:
            want.append(Body(body))
        want.append(End())
    # the head as parsed, its headers without the framing one the generator added last
    heads = [
        (g[0], g[1], g[2], g[7], g[4][: len(g[4]) - bool(g[7] or g[8])])
        for g in got
        if isinstance(g, tuple)
    ]
    assert heads == [w for w in want if isinstance(w, tuple)]
    assert [g for g in got if not isinstance(g, tuple)] == [
        w for w in want if not isinstance(w, tuple)
    ]
