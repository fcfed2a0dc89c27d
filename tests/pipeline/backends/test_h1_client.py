"""The lean HTTP/1.1 client's sans-IO core: requests framed, responses parsed into events under
bounds, whatever the byte splits, with the right keep-alive decision."""

from __future__ import annotations

import itertools

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.backends.h1_client import (
    End,
    Limits,
    ParseError,
    ResponseHead,
    ResponseParser,
    host_header,
    request_bytes,
)

WHOLE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: r1\r\n"
    b"x-request-id: r2\r\nContent-Length: 11\r\n\r\n"
    b'{"a": "b"}\n'
)
CHUNKED = (
    b"HTTP/1.1 100 Continue\r\n\r\n"  # an informational answer first: skipped
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n9;ext=1\r\n{}\n\ndata:\r\n8\r\n [DONE]\n\r\n0\r\nTrailer: t\r\n\r\n"
)
OLD = WHOLE.replace(b"HTTP/1.1", b"HTTP/1.0")
UNTIL_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it, until the close"


def events(data: bytes | list[bytes], *, eof: bool = False, **limits: int) -> list[object]:
    """Events of `data` fed in the given pieces, adjacent body chunks joined, heads as tuples."""
    core = ResponseParser(Limits(**limits))
    out: list[object] = []

    def drain() -> None:
        while core.events:
            ev = core.events.popleft()
            if isinstance(ev, bytes) and out and isinstance(out[-1], bytes):
                out[-1] += ev
            elif isinstance(ev, ResponseHead):
                out.append(
                    (ev.status, ev.version, tuple(ev.headers), ev.content_length, ev.chunked)
                )
            else:
                out.append(ev)

    for piece in [data] if isinstance(data, bytes) else data:
        core.feed(piece)
        drain()
    if eof:
        core.feed_eof()
        drain()
    return out


def test_a_whole_answer_keeps_its_headers_in_order_and_case() -> None:
    head, body, end = events(WHOLE)
    assert head == (
        200,
        "1.1",
        (
            (b"Content-Type", b"application/json"),
            (b"X-Request-Id", b"r1"),
            (b"x-request-id", b"r2"),
            (b"Content-Length", b"11"),
        ),
        11,
        False,
    )
    assert body == b'{"a": "b"}\n' and end == End(True)


def test_a_chunked_answer_is_decoded_and_its_trailers_dropped() -> None:
    head, body, end = events(CHUNKED)
    assert head == (
        200,
        "1.1",
        ((b"Content-Type", b"text/event-stream"), (b"Transfer-Encoding", b"chunked")),
        None,
        True,
    )
    assert body == b"data: {}\n\ndata: [DONE]\n" and end == End(True)


def test_an_until_close_body_ends_with_the_connection() -> None:
    head, body = events(UNTIL_CLOSE)  # no end yet: the body runs until the close
    assert head[0] == 200 and body == b"all of it, until the close"
    assert events(UNTIL_CLOSE, eof=True)[-1] == End(False)


@pytest.mark.parametrize("data", [WHOLE, CHUNKED, UNTIL_CLOSE])
@settings(max_examples=examples(200), deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(CHUNKED)), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_events(data: bytes, cuts: list[int]) -> None:
    bounds = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    eof = data is UNTIL_CLOSE
    assert events(pieces, eof=eof) == events(data, eof=eof)


def test_byte_at_a_time_agrees() -> None:
    for data in (WHOLE, CHUNKED):
        assert events([data[i : i + 1] for i in range(len(data))]) == events(data)


INFO_WITH_A_BODY = (  # a 1xx has no body (RFC 9110 15.2); what llhttp reads as one is dropped
    b"HTTP/1.1 150 Odd\r\nContent-Length: 4\r\n\r\nabcd"
    b"HTTP/1.1 151 Odd\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nef\r\n0\r\n\r\n" + WHOLE
)


def test_an_informational_answers_body_is_dropped_whatever_the_split() -> None:
    data = INFO_WITH_A_BODY
    whole = events(data)
    assert whole == events(WHOLE)
    assert events([data[i : i + 1] for i in range(len(data))]) == whole
    assert events([data[:60], data[60:75], data[75:]]) == whole


@pytest.mark.parametrize(
    ("data", "keep"),
    [
        (WHOLE, True),
        (WHOLE.replace(b"X-Request-Id: r1", b"Connection: close"), False),
        (OLD, False),
        (
            WHOLE.replace(b"HTTP/1.1", b"HTTP/1.0").replace(b"r1", b"r1\r\nConnection: keep-alive"),
            True,
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", True),
    ],
)
def test_keep_alive_decisions(data: bytes, keep: bool) -> None:
    core = ResponseParser()
    core.feed(data)
    assert core.events[-1] == End(keep)
    assert core.reusable is keep and core.ended


def test_bytes_after_the_answer_make_the_connection_unusable_but_the_answer_stands() -> None:
    core = ResponseParser()
    core.feed(WHOLE + b"HTTP/1.1 200 OK\r\n")
    assert core.events[-1] == End(True)
    assert not core.reusable and core.done
    core = ResponseParser()
    core.feed(WHOLE)
    core.feed(b"garbage")  # in a later read
    assert (
        not core.reusable and core.done and not any(isinstance(e, ParseError) for e in core.events)
    )


def test_a_reused_parser_reads_the_next_answer() -> None:
    core = ResponseParser()
    core.feed(WHOLE)
    core.events.clear()
    core.expect()
    assert not core.started and not core.ended
    core.feed(CHUNKED)
    assert core.events[-1] == End(True) and core.reusable


def test_the_header_block_is_bounded_by_bytes_and_count() -> None:
    many = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(20)) + b"\r\n"
    assert isinstance(events(many, max_headers=10)[-1], ParseError)
    assert isinstance(events(many, max_head_bytes=100)[-1], ParseError)
    assert isinstance(events(many)[0], tuple)
    # a header that never ends is cut one read past the bound, not buffered forever
    endless = [b"HTTP/1.1 200 OK\r\nX-Long: "] + [b"a" * 1000] * 10
    got = events(endless, max_head_bytes=4000)
    assert len(got) == 1 and isinstance(got[0], ParseError)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",  # the body broke off
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Le",  # the head broke off
    ],
)
def test_a_close_mid_answer_is_an_error(data: bytes) -> None:
    assert isinstance(events(data, eof=True)[-1], ParseError)


def test_a_close_before_any_byte_says_nothing_started() -> None:
    core = ResponseParser()
    core.feed_eof()
    assert not core.started and not core.events and core.done


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"SSH-2.0-OpenSSH\r\n",
    ],
)
def test_malformed_answers_are_errors(data: bytes) -> None:
    got = events(data)
    assert isinstance(got[-1], ParseError) and "malformed" in got[-1].message


def test_a_request_is_framed_with_host_and_length() -> None:
    data = request_bytes(
        "POST", "/v1/chat/completions", "w:8000", {"Content-Type": "application/json"}, b"{}"
    )
    assert data == (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: w:8000\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    )
    parser = httptools.HttpRequestParser(_Sink())  # what a server reads back
    parser.feed_data(data)
    assert parser.get_method() == b"POST"


class _Sink:
    pass


@pytest.mark.parametrize(
    "headers",
    [{"X-A": "v\r\nX-Injected: 1"}, {"X-A\nB": "v"}, {"X-A": "v\r"}],
)
def test_a_line_break_in_a_header_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        request_bytes("POST", "/x", "h", headers, b"")
    with pytest.raises(ValueError):
        request_bytes("POST", "/x\r\nX: 1", "h", {}, b"")


def test_host_headers_name_the_port_unless_it_is_the_default() -> None:
    assert host_header("w", 80, "http") == "w"
    assert host_header("w", 443, "https") == "w"
    assert host_header("w", 443, "http") == "w:443"
    assert host_header("::1", 8000, "http") == "[::1]:8000"
