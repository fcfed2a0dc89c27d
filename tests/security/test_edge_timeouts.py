"""Finding 11: what a client can hold on the gateway's listener.

Before: no header, body, idle or write timeouts and no connection cap: 200 slowloris sockets were
held for 90 s, and clients that stopped reading a stream kept their admission permits. Now a
request's headers must be complete within --header-timeout-secs, a body must keep coming
(--body-timeout-secs, else 408), a client must keep taking response bytes (--write-timeout-secs,
else it is cut and its permit freed), and --max-connections caps open connections.
"""

from __future__ import annotations

import time

import pytest
from integration.conftest import Launcher, assert_openai_error, wait_until

from .edge_attacks import (
    CHAT_PATH,
    NonReaders,
    Slowloris,
    connect,
    is_closed,
    read_response,
    request_head,
)

pytestmark = pytest.mark.serial  # times idle and slow-client deadlines

MSGS = [{"role": "user", "content": "hello"}]


def chat_ok(gw) -> None:  # type: ignore[no-untyped-def]
    with gw.client(timeout_s=10) as client:
        out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=3)
    assert out.choices[0].message.content


def cut(gw, reason: str) -> float:  # type: ignore[no-untyped-def]
    return gw.metric("smg_http_connections_cut_total", reason=reason) or 0.0


def test_slowloris_sockets_are_closed_after_the_header_timeout(launch: Launcher) -> None:
    # The default header timeout (10 s): the same flags as a gateway started before the fix.
    sim = launch.sim("m")
    gw = launch.gateway([sim])
    attack = Slowloris(gw.port, 60, every_s=2.0).start()
    silent = [connect(gw.port) for _ in range(20)]  # connect and never send a byte
    started = time.monotonic()
    try:
        time.sleep(4.0)
        assert attack.open_count() == 60  # the trickle keeps them alive for now
        chat_ok(gw)  # and normal clients are served meanwhile
        wait_until(lambda: attack.open_count() == 0, 20.0, "every slowloris socket closed")
        wait_until(lambda: all(is_closed(s) for s in silent), 5.0, "every silent socket closed")
        held = time.monotonic() - started
        assert held < 18.0, held  # 10 s after they connected (+ a sweep), not 90 s or more
        chat_ok(gw)
        assert cut(gw, "header_timeout") == 80
    finally:
        attack.close()
        for s in silent:
            s.close()


def test_a_client_that_stops_reading_loses_its_connection_and_its_permit(
    launch: Launcher,
) -> None:
    sim = launch.sim("m", tokens_per_second=400)  # a steady stream that fills buffers soon
    gw = launch.gateway([sim], max_concurrent_requests=2, queue_size=0, write_timeout_secs=2)
    attack = NonReaders(gw.port, 2).start()
    try:
        wait_until(lambda: gw.metric("smg_http_requests_in_flight") == 2.0, 10.0, "2 permits held")
        r = gw.request("POST", CHAT_PATH, {"model": "m", "messages": MSGS, "max_tokens": 2})
        assert_openai_error(r, 429, "admission_queue_full")  # the two readers hold them all
        wait_until(
            lambda: gw.metric("smg_http_requests_in_flight") == 0.0,
            30.0,
            "the stalled streams to lose their permits",
        )
        assert cut(gw, "write_stall") == 2
        wait_until(lambda: attack.closed_count() == 2, 10.0, "both attackers disconnected")
        wait_until(lambda: sim.stats()["in_flight"] == 0, 10.0, "the upstream streams dropped")
        chat_ok(gw)  # the permits came back
    finally:
        attack.close()


def test_a_reading_stream_is_never_cut(launch: Launcher) -> None:
    """The write deadline is about a client that takes nothing, not about a long stream."""
    sim = launch.sim("m", tokens_per_second=50)
    gw = launch.gateway([sim], write_timeout_secs=1)
    with gw.client(timeout_s=30) as client:
        chunks = list(
            client.chat.completions.create(model="m", messages=MSGS, max_tokens=200, stream=True)
        )  # ~4 s, far past the 1 s write deadline
    finish = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    assert finish == ["length"]
    assert cut(gw, "write_stall") == 0


def test_a_stalled_body_gets_408_and_the_connection_closes(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim], body_timeout_secs=2)
    s = connect(gw.port, timeout_s=15)
    try:
        s.sendall(request_head(CHAT_PATH, length=5000) + b'{"model": "m", "mess')
        started = time.monotonic()
        resp = read_response(s, timeout_s=15)
        waited = time.monotonic() - started
        assert resp.status == 408, resp
        assert resp.json()["error"]["code"] == "request_body_timeout"
        assert 1.5 <= waited < 8.0, waited
        wait_until(lambda: is_closed(s), 5.0, "the connection closed after the 408")
    finally:
        s.close()
    assert cut(gw, "body_timeout") == 1
    chat_ok(gw)


def test_a_slow_body_that_keeps_coming_is_read_whole(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim], body_timeout_secs=1.5)
    body = b'{"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}'
    s = connect(gw.port, timeout_s=15)
    try:
        s.sendall(request_head(CHAT_PATH, length=len(body)))
        for i in range(0, len(body), 20):  # ~4 s in all, each pause under the deadline
            s.sendall(body[i : i + 20])
            time.sleep(0.8)
        resp = read_response(s)
    finally:
        s.close()
    assert resp.status == 200, resp
    assert resp.json()["choices"][0]["message"]["content"]


def test_connections_past_the_cap_get_503_and_are_closed(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim], max_connections=20)
    held = [connect(gw.port) for _ in range(20)]
    try:
        wait_until(lambda: gw_open(gw) >= 20, 5.0, "20 open connections")
        extra = connect(gw.port)
        extra.sendall(request_head(CHAT_PATH, length=2) + b"{}")
        resp = read_response(extra)
        assert resp.status == 503, resp
        assert resp.json()["error"]["code"] == "too_many_connections"
        assert resp.headers.get("retry-after") == "1"
        wait_until(lambda: is_closed(extra), 5.0, "the refused connection closed")
        extra.close()
        more = [connect(gw.port) for _ in range(50)]  # accepted and closed: no backlog grows
        wait_until(lambda: all(is_closed(m) for m in more), 10.0, "every refused one closed")
        for m in more:
            m.close()
    finally:
        for h in held:
            h.close()
    wait_until(lambda: gw_open(gw) < 5, 10.0, "the held connections gone")
    chat_ok(gw)  # below the cap again: served
    assert (gw.metric("smg_http_connections_cut_total", reason="over_limit") or 0) >= 51


def gw_open(gw) -> float:  # type: ignore[no-untyped-def]
    return gw.metric("smg_http_connections_open") or 0.0


@pytest.mark.parametrize("flag", ["header-timeout-secs", "body-timeout-secs"])
def test_a_negative_timeout_stops_the_gateway_at_start(launch: Launcher, flag: str) -> None:
    import subprocess
    import sys

    from integration.conftest import REPO

    out = subprocess.run(
        [sys.executable, "-m", "smg", "launch", f"--{flag}", "-1", "--port", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == f"smg: error: --{flag} must be >= 0 (0 turns it off)"
