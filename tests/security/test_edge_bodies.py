"""Finding 12: request bodies are bounded before they are buffered.

Before: bodies up to 512 MiB were buffered before admission: three 100 MB bodies took the gateway
to 719 MB RSS. Now a body's size is taken from a global budget of buffered request bytes
(--max-buffered-request-bytes, 32 MiB) before it is read; a body that can never fit (over three
quarters of it) or is over --max-payload-size gets 413 from its Content-Length at once, and a body
of unknown length is cut with 413 as soon as it passes the limit. Small bodies never wait behind
large ones.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from integration.conftest import Launcher, wait_until

from .edge_attacks import (
    CHAT_PATH,
    BigBody,
    RssWatch,
    connect,
    read_response,
    request_head,
    rss_mb,
)

pytestmark = pytest.mark.serial  # measures RSS peaks and answer times

MSGS = [{"role": "user", "content": "hello"}]
RSS_BOUND_MB = 200


def test_413_from_content_length_before_the_body_is_read(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim])  # defaults: the budget's largest body is 24 MiB
    s = connect(gw.port, timeout_s=10)
    try:
        s.sendall(request_head(CHAT_PATH, length=100_000_000))  # headers only: no body follows
        started = time.monotonic()
        resp = read_response(s, timeout_s=10)
        assert time.monotonic() - started < 2.0  # answered without waiting for the body
    finally:
        s.close()
    assert resp.status == 413, resp
    err = resp.json()["error"]
    assert err["code"] == "request_body_too_large"
    assert "max_buffered_request_bytes" in err["message"], err


def test_max_payload_size_is_checked_from_content_length_too(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim], max_payload_size=10_000)
    s = connect(gw.port, timeout_s=10)
    try:
        s.sendall(request_head(CHAT_PATH, length=20_000))
        resp = read_response(s, timeout_s=10)
    finally:
        s.close()
    assert resp.status == 413 and "max_payload_size = 10000" in resp.json()["error"]["message"]


def test_a_chunked_body_over_the_limit_is_cut_while_it_streams(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim])
    with RssWatch(gw).watching() as rss:
        attack = BigBody(gw.port, 100, mb_per_s=200)  # no Content-Length: chunked
        attack.start()
        attack.join(60)
    assert attack.status == 413, (attack.status, attack.error)
    assert attack.response is not None
    assert "max_buffered_request_bytes" in attack.response.json()["error"]["message"]
    assert attack.sent_at_answer is not None
    assert attack.sent_at_answer < 40 * 2**20, attack.sent_at_answer  # cut near 24 MiB
    assert rss.peak_mb < RSS_BOUND_MB, rss.peak_mb
    assert gw.metric("smg_http_request_body_bytes_held") == 0.0  # the reservation came back


def test_three_concurrent_100_mb_bodies_stay_under_the_rss_bound(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim])
    base = rss_mb(gw)
    with RssWatch(gw).watching() as rss:
        attacks = [BigBody(gw.port, 100, content_length=i == 0, mb_per_s=100) for i in range(3)]
        for a in attacks:
            a.start()
        for a in attacks:
            a.join(120)
    assert [a.status for a in attacks] == [413, 413, 413], [(a.status, a.error) for a in attacks]
    assert rss.peak_mb < RSS_BOUND_MB, (base, rss.peak_mb)
    with gw.client() as client:  # and the gateway still serves
        out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
    assert out.choices[0].message.content


def test_bodies_under_the_limit_are_served_and_their_budget_returned(launch: Launcher) -> None:
    sim = launch.sim("m")
    gw = launch.gateway([sim])
    big = "x" * (4 * 2**20)  # 4 MiB: a large body, well under the 24 MiB largest
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(
                lambda _: gw.request(
                    "POST",
                    CHAT_PATH,
                    {"model": "m", "messages": [{"role": "user", "content": big}], "max_tokens": 2},
                    timeout_s=30,
                ),
                range(4),
            )
        )
    assert [r.status for r in results] == [200] * 4, [r.body[:200] for r in results]
    assert gw.metric("smg_http_request_body_bytes_held") == 0.0


def test_a_small_body_never_waits_behind_large_ones(launch: Launcher) -> None:
    """A large body holds the large share while it trickles in; a second large one waits for
    room (and gets 503 at the queue deadline); a small chat request is served at once."""
    sim = launch.sim("m")
    gw = launch.gateway(
        [sim], max_buffered_request_bytes=8 * 2**20, queue_timeout_secs=3, body_timeout_secs=30
    )  # largest body 6 MiB; small ones up to 128 KiB
    holder = BigBody(gw.port, 5.5, content_length=True, mb_per_s=0.5)  # ~11 s to send
    holder.start()
    try:
        wait_until(
            lambda: (gw.metric("smg_http_request_body_bytes_held") or 0) >= 5 * 2**20,
            10.0,
            "the slow large body holding its room",
        )
        waiter = BigBody(gw.port, 2, content_length=True, mb_per_s=100)
        waiter.start()
        wait_until(
            lambda: gw.metric("smg_http_request_body_waiting") == 1.0, 5.0, "a waiting large body"
        )
        started = time.monotonic()
        with gw.client() as client:
            out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
        assert out.choices[0].message.content
        chunked = gw.request(  # an iterable body: sent chunked, no Content-Length
            "POST", CHAT_PATH, iter([json.dumps({"model": "m", "messages": MSGS}).encode()])
        )
        assert chunked.status == 200, chunked
        assert time.monotonic() - started < 2.0
        waiter.join(20)
        assert waiter.response is not None, waiter.error
        assert_body_budget_timeout(waiter.response)
    finally:
        holder.join(30)
    assert holder.status == 200, (holder.status, holder.error)


def assert_body_budget_timeout(resp) -> None:  # type: ignore[no-untyped-def]
    assert resp.status == 503, resp
    assert resp.json()["error"]["code"] == "request_body_budget_timeout"
    assert resp.headers.get("retry-after") == "1"
