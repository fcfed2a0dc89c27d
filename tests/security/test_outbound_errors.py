"""Finding 8: nothing a client sees names a worker's address.

Before the fix, error bodies carried the worker's URL and the transport's own words
("Could not reach the worker: http://10.0.0.7:8000: ServerDisconnectedError"), PD errors
quoted the failing leg's URL and body, and `X-SMG-Routed-Worker-Id` was the worker's URL on
every answer. Here dead, resetting, stalling and overflowing workers fail in every way we can
make them, and no body, header or stream event any client receives contains their host:port.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator

import pytest
from integration.conftest import Gateway, Launcher, Resp, http

from .clients import bounded_request
from .hostile import HostileWorker, hostile_worker

MESSAGES = [{"role": "user", "content": "fail for me"}]


def _visible(resp: Resp) -> str:
    return json.dumps(resp.headers) + resp.body.decode(errors="replace")


def _assert_hidden(resp: Resp, *ports: int) -> None:
    seen = _visible(resp)
    for port in ports:
        assert f":{port}" not in seen and str(port) not in seen, seen[:800]
    assert "127.0.0.1" not in seen, seen[:800]


def _ask(gw: Gateway, body: dict[str, object]) -> Resp:
    """A request that must end (endless or stalled answers fail the test, never hang it)."""
    status, headers, raw = bounded_request(gw.port, "/v1/chat/completions", body)
    return Resp(status, headers, raw)


@pytest.fixture
def worker() -> Iterator[HostileWorker]:
    with hostile_worker("m") as w:
        yield w


@pytest.mark.parametrize("mode", ["reset", "endless", "stall"])
def test_failing_workers_leave_no_address_in_answers(
    launch: Launcher, worker: HostileWorker, mode: str
) -> None:
    gw = launch.gateway(
        [worker.url],
        max_upstream_response_bytes=1 << 20,
        upstream_idle_timeout_secs=1,
        retry_max_retries=2,
        retry_initial_backoff_ms=10,
    )
    ok = gw.request("POST", "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    assert ok.status == 200
    routed = ok.header("X-SMG-Routed-Worker-Id")
    assert routed is not None and uuid.UUID(routed)  # the worker's id, not its URL
    _assert_hidden(ok, worker.port)
    worker.mode = mode
    for stream in (False, True) if mode != "stall" else (True,):  # it stalls streams only
        resp = _ask(gw, {"model": "m", "messages": MESSAGES, "stream": stream})
        assert resp.status >= 500 or b'"error"' in resp.body, (resp.status, resp.body[:300])
        _assert_hidden(resp, worker.port)


def test_a_dead_worker_leaves_no_address_in_answers(launch: Launcher) -> None:
    with hostile_worker("m") as worker:
        gw = launch.gateway([worker.url], health_check_interval_secs=60, retry_max_retries=1)
        port = worker.port
    # the worker is gone (its port closed) but still marked ready: the gateway tries it
    r = gw.request("POST", "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    assert r.status == 502 and r.json()["error"]["code"] == "upstream_connection_error", r.body
    _assert_hidden(r, port)


def test_pd_leg_failures_leave_no_address(launch: Launcher) -> None:
    prefill = launch.sim(role="prefill", bootstrap_port=8998)
    decode = launch.sim(role="decode")
    gw = launch.gateway(prefill=[(prefill, 8998)], decode=[decode])
    ok = gw.request("POST", "/v1/chat/completions", {"model": "sim-model", "messages": MESSAGES})
    assert ok.status == 200
    for name in ("X-SMG-Routed-Worker-Id", "X-SMG-Prefill-Worker-Id"):
        value = ok.header(name)
        assert value is not None and uuid.UUID(value)
    _assert_hidden(ok, prefill.port, decode.port)
    prefill.configure(status_override=500)
    r = _ask(gw, {"model": "sim-model", "messages": MESSAGES})
    assert r.status == 502 and r.json()["error"]["code"] == "pd_prefill_failed", r.body
    _assert_hidden(r, prefill.port, decode.port)
    # streamed: a 502, an error event, or (the decode leg won the race) a whole answer
    r = _ask(gw, {"model": "sim-model", "messages": MESSAGES, "stream": True})
    assert r.status in (200, 502), r.body
    _assert_hidden(r, prefill.port, decode.port)


def test_grpc_engine_failures_leave_no_address(launch: Launcher) -> None:
    engine = launch.engine("g", decode_ms_per_token=50)
    gw = launch.gateway([engine], retry_max_retries=1)
    body = {"model": "g", "messages": MESSAGES, "max_tokens": 200, "stream": True}
    # kill the engine mid-stream: the client's stream ends with an error event
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    data = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"Content-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    got = b""
    while b"data:" not in got:
        got += sock.recv(65536)
    engine.kill()
    while not got.endswith(b"0\r\n\r\n"):
        piece = sock.recv(65536)
        if not piece:
            break
        got += piece
    sock.close()
    assert b"engine_error" in got or b"error" in got, got[-500:]
    text = got.decode(errors="replace")
    assert f":{engine.port}" not in text and "127.0.0.1" not in text, text[-800:]
    # and the next request (the engine is down) says so without its address either
    r = http(
        "POST", gw.url + "/v1/chat/completions", {"model": "g", "messages": MESSAGES}, timeout_s=30
    )
    assert r.status in (502, 503), r.body
    _assert_hidden(r, engine.port)
