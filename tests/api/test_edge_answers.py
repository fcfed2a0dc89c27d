"""aiohttp's response objects written on the lean edge (smg/api/edge_answers.py): a whole
`web.Response` and a `web.StreamResponse` prepared against `EdgeClient`, over a real socket to
aiohttp's client. This pins what aiohttp's `StreamResponse.prepare` reads of a request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import aiohttp
import pytest
from aiohttp import web

from smg.api.edge_answers import (
    EdgeClient,
    client_headers,
    header_block,
    whole_body_reply,
    whole_reply,
)
from smg.edge.h1 import RequestHead
from smg.edge.server import EdgeRequest, EdgeResponse, EdgeServer, Reply
from smg.flow.answer import Whole, as_response

pytestmark = pytest.mark.unit


def _cors(origin: str | None, resp: web.StreamResponse) -> None:
    if origin == "https://ok.example":
        resp.headers["Access-Control-Allow-Origin"] = origin


async def _handler(req: EdgeRequest, out: EdgeResponse) -> Reply | None:
    path = req.head.path
    if path == b"/whole":
        resp = web.Response(
            body=b'{"a":1}', status=201, content_type="application/json", headers={"X-A": "1"}
        )
        resp.headers["Content-Length"] = "999"  # a framing header: the edge writes its own
        return whole_reply(resp)
    if path == b"/text":
        return whole_reply(web.Response(text="héllo"))
    if path == b"/neutral":  # the flow's `Whole`, rendered without an aiohttp response
        w = Whole(b'{"b":2}', {"X-Request-Id": "r-1", "X-B": "é"}, status=202)
        return whole_body_reply(w.status, w.body, w.content_type, w.headers)
    origin = dict((k.decode(), v.decode()) for k, v in req.head.headers).get("Origin")
    client = EdgeClient(req.head, path.decode(), out, origin, _cors)
    stream = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await stream.prepare(cast(web.Request, client))
    for i in range(3):
        await stream.write(b"data: %d\n\n" % i)
    await stream.write_eof(b"data: [DONE]\n\n")
    assert client.output_size == 3 * 9 + 14
    return None


@pytest.fixture
async def url() -> AsyncIterator[str]:
    server = EdgeServer(_handler)
    await server.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close(1.0)


async def test_a_whole_answer_keeps_status_headers_and_body(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/whole") as r:
            assert r.status == 201
            assert r.headers["X-A"] == "1"
            assert r.headers["Content-Type"] == "application/json"
            assert r.headers["Content-Length"] == "7"
            assert await r.read() == b'{"a":1}'
        async with s.get(url + "/text") as r:  # same connection: framing was right
            assert r.headers["Content-Type"].startswith("text/plain")
            assert (await r.read()).decode() == "héllo"
        async with s.get(url + "/neutral") as r:
            assert r.status == 202
            assert r.headers["Content-Type"] == "application/json"
            assert r.headers["X-Request-Id"] == "r-1"
            assert r.headers["X-B"] == "é"
            assert r.headers["Content-Length"] == "7"
            assert await r.read() == b'{"b":2}'


def test_a_whole_becomes_the_same_aiohttp_response() -> None:
    """The aiohttp routes get from a `Whole` what `render.whole` built before it."""
    w = Whole(b"{}", {"X-Request-Id": "r-2"}, status=200)
    resp = as_response(w)
    assert isinstance(resp, web.Response)
    assert (resp.status, resp.body, resp.content_type) == (200, b"{}", "application/json")
    assert resp.headers["X-Request-Id"] == "r-2"
    stream = web.StreamResponse()
    assert as_response(stream) is stream
    # a relayed answer's headers carry their own type (any case); none: typed as aiohttp does
    relayed = whole_body_reply(200, b"x", None, {"content-type": "text/plain", "X-A": "1"})
    assert relayed.headers == b"content-type: text/plain\r\nX-A: 1\r\n"
    untyped = whole_body_reply(200, b"x", None, {"X-A": "1"})
    assert untyped.headers == b"Content-Type: application/octet-stream\r\nX-A: 1\r\n"
    assert whole_body_reply(204, b"", None, {}).headers == b""
    assert as_response(Whole(b"x", {"X-A": "1"}, 200, None)).content_type == (
        "application/octet-stream"
    )
    with pytest.raises(ValueError, match="line break"):
        whole_body_reply(200, b"", "application/json", {"X-Bad": "a\r\nInjected: 1"})


async def test_a_stream_is_chunked_and_ends(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for origin, cors in (("https://ok.example", "https://ok.example"), ("https://x.y", None)):
            async with s.get(url + "/stream", headers={"Origin": origin}) as r:
                assert r.status == 200
                assert r.headers["Transfer-Encoding"] == "chunked"
                assert r.headers["Content-Type"] == "text/event-stream"
                assert r.headers.get("Access-Control-Allow-Origin") == cors
                body = await asyncio.wait_for(r.read(), 5)
            assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"


async def test_an_http10_client_gets_the_stream_until_the_close(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /stream HTTP/1.0\r\nHost: x\r\n\r\n")
    raw = await asyncio.wait_for(reader.read(), 5)  # to EOF: HTTP/1.0 ends with the close
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"chunked" not in head.lower()
    assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"


def test_header_block_drops_framing_and_refuses_line_breaks() -> None:
    block = header_block([("X-A", "1"), ("content-length", "9"), ("Connection", "close")])
    assert block == b"X-A: 1\r\n"
    assert header_block([("X-B", "caf\udcc3\udca9")]) == b"X-B: caf\xc3\xa9\r\n"  # bytes kept
    for bad in ("a\r\nX-Evil: 1", "a\nb", "a\rb"):
        with pytest.raises(ValueError, match="line break"):
            header_block([("X-A", bad)])


def test_client_headers_decode_utf8_and_keep_undecodable_bytes() -> None:
    raw = [(b"Content-Type", b"application/json"), (b"X-\xff", b"caf\xc3\xa9 \xff")]
    head = RequestHead(b"POST", b"/v1/completions", "1.1", raw, True, False, 2)
    headers = client_headers(head)
    assert list(headers.items()) == [
        ("Content-Type", "application/json"),
        ("X-\udcff", "café \udcff"),
    ]
    assert headers["content-type"] == "application/json"  # case-insensitive, as aiohttp's
    ascii_only = client_headers(RequestHead(b"POST", b"/", "1.1", raw[:1], True, False, 2))
    assert list(ascii_only.items()) == [("Content-Type", "application/json")]
