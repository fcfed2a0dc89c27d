"""`request_target`: the method and path a connection's next bytes begin, from any prefix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.edge.target import MALFORMED, MAX_LINE, request_target

pytestmark = pytest.mark.unit

LINE = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"


def test_the_method_and_the_path_without_its_query() -> None:
    assert request_target(LINE) == (b"POST", b"/v1/chat/completions")
    assert request_target(b"\r\n\r\nGET /v1/models HTTP/1.1\r\n") == (b"GET", b"/v1/models")


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(min_value=0, max_value=len(LINE)))
def test_a_prefix_is_incomplete_until_the_target_ends(cut: int) -> None:
    got = request_target(LINE[:cut])
    if cut <= len(b"POST /v1/chat/completions?x=1"):
        assert got is None
    else:
        assert got == (b"POST", b"/v1/chat/completions")


@pytest.mark.parametrize(
    "data",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello on a plain port
        b"GE\nT / HTTP/1.1\r\n",
        b"G3T / HTTP/1.1\r\n",
        b" / HTTP/1.1\r\n",
        b"GET  HTTP/1.1\r\n",
        b"A" * 40,
        b"GET /" + b"a" * MAX_LINE,
    ],
)
def test_bytes_that_cannot_begin_a_request_line_are_malformed(data: bytes) -> None:
    assert request_target(data) == MALFORMED
