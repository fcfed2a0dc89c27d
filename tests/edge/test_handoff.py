"""The hand-over: the request-line judge (pure, any split), then real loopback sockets where the
edge hands non-native connections to a small aiohttp server on the same port (TLS too)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import orjson
import pytest
import trustme
import uvloop
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply, Timeouts
from smg.edge.handoff import MALFORMED, Prefix, native_routes, request_target
from smg.edge.server import EdgeServer

# -- the request-line judge (sans-IO) ---------------------------------------------------------

LINES = [
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", (b"POST", b"/v1/chat/completions")),
    (b"GET /v1/models?limit=2 HTTP/1.1\r\n\r\n", (b"GET", b"/v1/models")),
    (b"\r\nDELETE /workers/a%20b HTTP/1.1\r\n\r\n", (b"DELETE", b"/workers/a%20b")),
    (b"OPTIONS * HTTP/1.1\r\n\r\n", (b"OPTIONS", b"*")),
    (b"GET http://h/x?y HTTP/1.1\r\n\r\n", (b"GET", b"http://h/x")),
]


@pytest.mark.parametrize(("data", "target"), LINES)
def test_request_target_reads_the_method_and_path(data: bytes, target: tuple[bytes, bytes]) -> None:
    assert request_target(data) == target
    cut = data.index(target[1]) + len(target[1])
    for n in range(cut):  # every shorter prefix: not yet
        assert request_target(data[:n]) is None, data[:n]


@pytest.mark.parametrize(
    "data",
    [b"\x16\x03\x01\x02\x00", b"G\xffT / HTTP/1.1", b"A" * 40, b" / HTTP/1.1", b"GET /x\r\n"],
)
def test_what_cannot_start_a_request_line_is_malformed(data: bytes) -> None:
    assert request_target(data) is MALFORMED
    assert native_routes({(b"GET", b"/x")})(data) is True  # the edge's core answers it (400)


@settings(max_examples=examples(200), deadline=None)
@given(
    index=st.integers(0, len(LINES) - 1),
    cuts=st.lists(st.integers(1, 60), max_size=8),
    native=st.booleans(),
)
def test_any_split_gives_the_same_decision_and_bytes(
    index: int, cuts: list[int], native: bool
) -> None:
    data, target = LINES[index]
    routes = {target} if native else {(b"GET", b"/elsewhere")}
    prefix = Prefix(native_routes(routes), 8192)
    pieces, at = [], 0
    for c in sorted(set(cuts)):
        if at < c < len(data):
            pieces.append(data[at:c])
            at = c
    pieces.append(data[at:])
    fed = b""
    for piece in pieces:
        fed += piece
        decision, held = prefix.add(piece)
        if decision is None:
            assert held == b"" and request_target(fed) is None
            continue
        assert decision is native
        assert held == fed  # nothing lost, nothing doubled
        break
    else:
        raise AssertionError("no decision on a whole request line")


def line_then(lines: list[bytes], tails: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Any bytes, or one of `lines` followed by a tail."""
    return st.binary(max_size=40) | st.builds(
        lambda line, tail: line + tail, st.sampled_from(lines), tails
    )


@settings(max_examples=examples(300), deadline=None)
@given(
    data=st.one_of(
        line_then([*(d for d, _ in LINES), b"GET /x\r\n", b"\r\nPUT /a?b"], st.binary(max_size=8)),
        st.builds(bytes, st.lists(st.sampled_from(b"GET /?\r\n a"), max_size=24)),
    )
)
def test_more_bytes_never_change_a_decision(data: bytes) -> None:
    """Once a prefix is judged (a target or malformed), every longer one is judged the same."""
    first = None
    for k in range(len(data) + 1):
        got = request_target(data[:k])
        if first is None:
            first = got
        else:
            assert got == first, (data[:k], got, first)


ROUTE_LINES = [
    b"POST /v1/chat/completions",
    b"GET /edge",
    b"POST /v1/chat/completionsX",
    b"\r\nGET /edge",
    b"GET  /edge",
    b"get /edge",
]


@settings(max_examples=examples(300), deadline=None)
@given(
    data=line_then(
        ROUTE_LINES,
        st.binary(max_size=8) | st.sampled_from([b" HTTP/1.1\r\n", b"?a=1 ", b"/ ", b"?"]),
    )
)
def test_the_usual_request_line_is_judged_as_request_target_judges_it(data: bytes) -> None:
    """`native`'s startswith shortcut for a native route's line says what the regex says."""
    routes = {(b"POST", b"/v1/chat/completions"), (b"GET", b"/edge")}
    target = request_target(data)
    expected = None if target is None else target is MALFORMED or target in routes
    assert native_routes(routes)(data) is expected


def test_a_prefix_past_its_bound_is_fed_to_the_core() -> None:
    prefix = Prefix(native_routes({(b"GET", b"/x")}), 64)
    assert prefix.add(b"GET /" + b"a" * 50) == (None, b"")
    decision, held = prefix.add(b"b" * 20)
    assert decision is True and held == b"GET /" + b"a" * 50 + b"b" * 20


# -- over sockets -----------------------------------------------------------------------------


async def native_handler(req: EdgeRequest, _: EdgeResponse) -> Reply:
    body = await req.read()
    if req.head.query == b"slow":
        await asyncio.sleep(0.2)
    return Reply(200, orjson.dumps({"edge": req.head.path.decode(), "len": len(body)}))


async def other(request: web.BaseRequest) -> web.Response:
    body = await request.read()
    return web.json_response({"aiohttp": request.path, "len": len(body)})


NATIVE = native_routes({(b"POST", b"/v1/chat/completions"), (b"GET", b"/edge")})


async def start(
    ctx: ssl.SSLContext | None = None, header: float = 2.0
) -> tuple[EdgeServer, web.Server]:
    other_server = web.Server(other, handler_cancellation=True, access_log=None)
    server = EdgeServer(
        native_handler,
        timeouts=Timeouts(header=header, keep_alive=5.0),
        native=NATIVE,
        handoff=other_server,
    )
    await server.start("127.0.0.1", 0, ssl=ctx)
    return server, other_server


@pytest.fixture
async def pair() -> AsyncIterator[tuple[EdgeServer, web.Server]]:
    server, other_server = await start()
    yield server, other_server
    await server.close(grace=1.0)
    await other_server.shutdown(1.0)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, object]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split()[1])
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return status, orjson.loads(await asyncio.wait_for(reader.readexactly(length), 5))


def request(method: str, path: str, body: bytes = b"") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def test_a_non_native_first_request_is_served_by_the_other_protocol(
    pair: tuple[EdgeServer, web.Server],
) -> None:
    server, other_server = pair
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(request("POST", "/v1/responses?x=1", b"hello"))
    assert await read_response(reader) == (200, {"aiohttp": "/v1/responses", "len": 5})
    assert not server.connections and len(other_server.connections) == 1
    writer.write(request("POST", "/v1/chat/completions", b"{}"))  # aiohttp's for good now
    assert await read_response(reader) == (200, {"aiohttp": "/v1/chat/completions", "len": 2})
    writer.close()
    big = request("POST", "/v1/responses", b"b" * 500_000)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for i in range(0, len(big), 65536):  # the head and part of the body held, the rest after
        writer.write(big[i : i + 65536])
        await writer.drain()
    assert await read_response(reader) == (200, {"aiohttp": "/v1/responses", "len": 500_000})
    writer.close()


@pytest.mark.parametrize("answered_first", [True, False])
async def test_keep_alive_native_then_non_native_hands_over_at_the_second(
    pair: tuple[EdgeServer, web.Server], answered_first: bool
) -> None:
    """The second request comes after the first's answer, or in its own read while the first's
    handler still runs (held, not pipelined: judged once the answer is out)."""
    server, other_server = pair
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(request("POST", "/v1/chat/completions?slow", b"abc"))
    if answered_first:
        assert await read_response(reader) == (200, {"edge": "/v1/chat/completions", "len": 3})
        assert len(server.connections) == 1 and not other_server.connections
    else:
        await asyncio.sleep(0.05)
    writer.write(request("DELETE", "/workers/w1"))
    if not answered_first:
        assert await read_response(reader) == (200, {"edge": "/v1/chat/completions", "len": 3})
    assert await read_response(reader) == (200, {"aiohttp": "/workers/w1", "len": 0})
    assert not server.connections and len(other_server.connections) == 1
    writer.close()


async def test_a_request_line_in_one_byte_writes_still_routes(
    pair: tuple[EdgeServer, web.Server],
) -> None:
    server, _ = pair
    for data, expect in [
        (request("GET", "/edge?q=1"), {"edge": "/edge", "len": 0}),
        (request("GET", "/edgeX"), {"aiohttp": "/edgeX", "len": 0}),
    ]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        head, rest = data[:30], data[30:]
        for i in range(len(head)):
            writer.write(head[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(rest)
        assert await read_response(reader) == (200, expect)
        writer.close()


async def test_a_request_line_that_never_completes_gets_408() -> None:
    server, other_server = await start(header=0.3)
    try:
        for first in (b"", request("GET", "/edge")):  # from the connect, or after an answer
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            if first:
                writer.write(first)
                assert (await read_response(reader))[0] == 200
            writer.write(b"POST /v1/chat/comp")  # held: native() cannot tell yet
            status, body = await read_response(reader)
            error = body["error"]
            assert status == 408 and isinstance(error, dict)
            assert error["code"] == "request_header_timeout"
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert not other_server.connections
            writer.close()
    finally:
        await server.close(grace=1.0)
        await other_server.shutdown(1.0)


async def test_pipelined_native_then_non_native_gets_200_then_400(
    pair: tuple[EdgeServer, web.Server],
) -> None:
    server, other_server = pair
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(request("POST", "/v1/chat/completions", b"x") + request("GET", "/workers"))
    assert await read_response(reader) == (200, {"edge": "/v1/chat/completions", "len": 1})
    status, body = await read_response(reader)
    assert status == 400
    error = body["error"]
    assert isinstance(error, dict) and error["code"] == "pipelined_handoff"
    assert "new connection" in error["message"]
    assert await asyncio.wait_for(reader.read(), 5) == b""  # then closed
    assert not other_server.connections
    writer.close()


async def test_a_handed_over_connection_leaves_the_registry_and_close_does_not_wait() -> None:
    server, other_server = await start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request("GET", "/workers"))
        assert (await read_response(reader))[0] == 200
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.sleep(0.05)
        assert len(server.connections) == 1  # only the one still the edge's

        async def read_then_close() -> bytes:
            out = await idle_r.read()
            idle_w.close()  # as a client does on EOF: the edge's lingering close ends here
            return out

        idle = asyncio.create_task(read_then_close())
        started = asyncio.get_running_loop().time()
        await server.close(grace=3.0)
        assert asyncio.get_running_loop().time() - started < 1.0  # not the grace: not waited for
        assert await asyncio.wait_for(idle, 5) == b""  # the edge's idle one: closed
        writer.write(request("GET", "/still-served"))  # the handed-over one lives on
        assert await read_response(reader) == (200, {"aiohttp": "/still-served", "len": 0})
        writer.close()
    finally:
        await other_server.shutdown(1.0)


async def hand_over_twice(tls: bool) -> None:
    """A native request, then a non-native one (handed over), then one more (aiohttp's now)."""
    server_ctx = client_ctx = None
    if tls:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(server_ctx)
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
    server, other_server = await start(server_ctx)
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=client_ctx, server_hostname="127.0.0.1" if tls else None
        )
        writer.write(request("POST", "/v1/chat/completions", b"tls"))
        assert await read_response(reader) == (200, {"edge": "/v1/chat/completions", "len": 3})
        writer.write(request("POST", "/v1/responses", b"secure"))
        assert await read_response(reader) == (200, {"aiohttp": "/v1/responses", "len": 6})
        writer.write(request("GET", "/again"))
        assert await read_response(reader) == (200, {"aiohttp": "/again", "len": 0})
        assert not server.connections and len(other_server.connections) == 1
        writer.close()
    finally:
        await server.close(grace=1.0)
        await other_server.shutdown(1.0)


async def test_the_hand_over_works_over_tls() -> None:
    await hand_over_twice(tls=True)


@pytest.mark.parametrize("tls", [False, True])
def test_the_hand_over_works_on_uvloop(tls: bool) -> None:
    """The gateway runs on uvloop: its transports (TCP and TLS) take `set_protocol` too."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
        runner.run(hand_over_twice(tls))
