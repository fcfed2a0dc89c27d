"""The data port's two servers (smg/app/edge_listener.py): the hot inference routes answered on
the lean edge, every other route on aiohttp's application after the connection is handed over,
one port, one set of connection series."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from .conftest import Gateway, Launcher

pytestmark = pytest.mark.integration

CHAT = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def gw(module_launch: Launcher) -> Iterator[Gateway]:
    (sim,) = module_launch.sims("alpha")
    yield module_launch.gateway([sim])


def _post(conn: http.client.HTTPConnection, path: str, body: object) -> tuple[int, dict, bytes]:
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def test_one_keep_alive_connection_is_served_by_both(gw: Gateway) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=15)
    try:
        for _ in range(3):  # the edge's own keep-alive
            status, headers, body = _post(conn, "/v1/chat/completions", CHAT)
            assert status == 200, body
            assert json.loads(body)["object"] == "chat.completion"
            assert headers["X-Request-Id"].startswith("chatcmpl-")
        sock = conn.sock
        status, body = _get(conn, "/v1/models")  # handed over to aiohttp, same socket
        assert status == 200, body
        assert [m["id"] for m in json.loads(body)["data"]] == ["alpha"]
        status, headers, body = _post(conn, "/v1/chat/completions", CHAT)  # now aiohttp's
        assert status == 200, body
        assert json.loads(body)["object"] == "chat.completion"
        assert conn.sock is sock  # never reconnected
    finally:
        conn.close()


def test_errors_on_the_edge_keep_the_openai_shape(gw: Gateway) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=15)
    try:
        status, headers, body = _post(conn, "/v1/chat/completions", {"model": "alpha"})
        assert status == 400
        err = json.loads(body)["error"]
        assert err["code"] == headers["X-SMG-Error-Code"]
        assert err["param"] == "messages"
        status, headers, body = _post(conn, "/v1/chat/completions", {**CHAT, "model": "nope"})
        assert status == 404
        assert json.loads(body)["error"]["code"] == "model_not_found"
        conn.request("POST", "/v1/chat/completions", b"{oops", {"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 400 and json.loads(r.read())["error"]["code"] == "invalid_json"
        conn.request("POST", "/v1/chat/completions", b"{}", {"Content-Type": "text/plain"})
        r = conn.getresponse()
        assert r.status == 415
        r.read()
        status, _, body = _post(conn, "/v1/chat/completions", CHAT)  # still in step
        assert status == 200, body
    finally:
        conn.close()


def test_edge_requests_are_counted_like_the_others(gw: Gateway) -> None:
    def served() -> float:
        return sum(
            v
            for name, labels, v in gw.metrics()
            if name == "smg_http_requests_total" and labels.get("path") == "/v1/chat/completions"
        )

    before = served()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=15)
    try:
        for _ in range(4):
            assert _post(conn, "/v1/chat/completions", CHAT)[0] == 200
    finally:
        conn.close()
    assert served() - before == 4
