"""Graceful shutdown: on SIGTERM the gateway reports draining, lets in-flight requests (streams
included) finish, and exits 0 well within the grace period."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

from .conftest import Gateway, Launcher, http, wait_completed, wait_until

MSGS = [{"role": "user", "content": "shutdown"}]
GRACE_S = 10


def unary(gw: Gateway) -> str:
    with gw.client() as client:
        out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=3)
    assert out.choices[0].finish_reason == "length"
    return out.choices[0].message.content or ""


def streamed(gw: Gateway) -> str:
    with gw.client() as client:
        chunks = list(
            client.chat.completions.create(model="m", messages=MSGS, max_tokens=20, stream=True)
        )
    finish = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finish == ["length"], finish
    return "".join(ch.delta.content or "" for c in chunks for ch in c.choices)


def test_sigterm_drains_in_flight_requests_then_exits_0(launch: Launcher) -> None:
    # Every answer takes 1.5 s to start; streams then take 1 s more (20 tokens at 20/s).
    sim = launch.sim("m", first_token_ms=1500, tokens_per_second=20)
    gw = launch.gateway([sim], shutdown_grace_period_secs=GRACE_S)
    assert gw.request("GET", "/readiness").status == 200

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(unary, gw) for _ in range(2)]
        futures += [pool.submit(streamed, gw) for _ in range(2)]
        wait_until(lambda: sim.stats()["in_flight"] == 4, 5.0, "four requests on the worker")

        gw.proc.signal(signal.SIGTERM)
        sigterm_at = time.monotonic()

        def draining() -> bool:
            r = http("GET", gw.url + "/readiness", timeout_s=2.0)
            return r.status == 503 and r.json().get("reason") == "draining"

        wait_until(draining, 1.0, "/readiness to answer 503 draining")
        assert not any(f.done() for f in futures), "in-flight requests ended before the drain"
        assert gw.proc.alive

        texts = [f.result(timeout=GRACE_S) for f in futures]
    assert all(texts)
    assert len(set(texts[2:])) == 1  # the same prompt: the same streamed text

    code = gw.proc.popen.wait(timeout=GRACE_S)
    took = time.monotonic() - sigterm_at
    assert code == 0, gw.proc.log_tail()
    assert took < GRACE_S / 2, took  # it left once the work was done, not at the deadline
    (stats,) = wait_completed(4, sim)  # a stream counts once its last byte is sent: wait
    assert stats["cancelled_streams"] == 0, stats
