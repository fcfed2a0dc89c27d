"""Finding 17: lifecycle.

Before: during the drain new requests were still accepted, and SIGHUP killed the process in the
middle of a stream. Now, once SIGTERM starts the drain, new requests get 503 `shutting_down` with
Retry-After (and /readiness says "draining") while the streams in flight finish; SIGHUP is logged
and ignored by every long-running command (the gateway, the simulated worker and engine).
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from integration.conftest import (
    Gateway,
    Launcher,
    assert_openai_error,
    http,
    wait_completed,
    wait_until,
)

from .edge_attacks import CHAT_PATH, connect, read_response, request_head

MSGS = [{"role": "user", "content": "lifecycle"}]


def stream_text(gw: Gateway, max_tokens: int) -> tuple[str, str | None]:
    """A whole streamed chat: its text and finish reason."""
    with gw.client(timeout_s=60) as client:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=MSGS, max_tokens=max_tokens, stream=True
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    return text, finish[-1] if finish else None


def start_stream(pool: ThreadPoolExecutor, gw: Gateway, sim: Any, max_tokens: int) -> Future[Any]:
    before = sim.stats()["requests"]
    fut = pool.submit(stream_text, gw, max_tokens)
    wait_until(lambda: sim.stats()["in_flight"] >= 1 and sim.stats()["requests"] > before,
               10.0, "the stream running on the worker")  # fmt: skip
    return fut


def test_drain_refuses_new_requests_with_503_while_the_stream_finishes(launch: Launcher) -> None:
    sim = launch.sim("m", tokens_per_second=20)
    gw = launch.gateway([sim], shutdown_grace_period_secs=30)
    keep = connect(gw.port, timeout_s=10)  # a keep-alive connection opened before the drain
    with ThreadPoolExecutor(2) as pool:
        stream = start_stream(pool, gw, sim, max_tokens=60)  # ~3 s of tokens
        gw.proc.signal(signal.SIGTERM)
        wait_until(
            lambda: http("GET", gw.url + "/readiness", timeout_s=2).status == 503,
            3.0,
            "readiness to say draining",
        )
        r = gw.request("POST", CHAT_PATH, {"model": "m", "messages": MSGS, "max_tokens": 2})
        assert_openai_error(r, 503, "shutting_down")
        assert r.header("Retry-After") == "1"
        body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
        keep.sendall(request_head(CHAT_PATH, length=len(body)) + body)
        again = read_response(keep)
        assert again.status == 503 and again.json()["error"]["code"] == "shutting_down"
        assert not stream.done() and gw.proc.alive
        text, finish = stream.result(timeout=30)
    keep.close()
    assert text and finish == "length"  # the stream in flight ended whole
    assert gw.proc.popen.wait(timeout=20) == 0
    (stats,) = wait_completed(1, sim)  # a stream counts once its last byte is sent: wait
    assert stats["cancelled_streams"] == 0, stats


def test_requests_queued_for_admission_are_answered_503_when_the_drain_starts(
    launch: Launcher,
) -> None:
    sim = launch.sim("m", tokens_per_second=20)
    gw = launch.gateway(
        [sim], max_concurrent_requests=1, queue_size=4, shutdown_grace_period_secs=30
    )
    with ThreadPoolExecutor(3) as pool:
        stream = start_stream(pool, gw, sim, max_tokens=60)
        queued = pool.submit(
            gw.request, "POST", CHAT_PATH, {"model": "m", "messages": MSGS, "max_tokens": 2}
        )
        wait_until(lambda: gw.metric("smg_http_requests_queued") == 1.0, 5.0, "a queued request")
        gw.proc.signal(signal.SIGTERM)
        assert_openai_error(queued.result(timeout=5), 503, "shutting_down")
        assert stream.result(timeout=30)[1] == "length"
    assert gw.proc.popen.wait(timeout=20) == 0


def sighup_during_stream(gw: Gateway, sim: Any, *targets: Any) -> None:
    with ThreadPoolExecutor(1) as pool:
        stream = start_stream(pool, gw, sim, max_tokens=40)  # ~2 s
        for proc in targets:
            proc.signal(signal.SIGHUP)
        time.sleep(0.5)
        assert all(p.alive for p in targets)
        text, finish = stream.result(timeout=30)
    assert text and finish == "length"


def test_sighup_during_a_stream_leaves_the_stream_and_the_processes_alive(
    launch: Launcher,
) -> None:
    sim = launch.sim("m", tokens_per_second=20)
    gw = launch.gateway([sim])
    sighup_during_stream(gw, sim, gw.proc, sim.proc)
    with gw.client() as client:  # both still serve
        out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
    assert out.choices[0].message.content
    assert "sighup_ignored" in gw.proc.log_tail()


def test_sighup_leaves_a_simulated_grpc_engine_serving(launch: Launcher) -> None:
    engine = launch.engine("m")
    engine.proc.signal(signal.SIGHUP)
    time.sleep(0.5)
    assert engine.proc.alive
    assert isinstance(engine.stats(), dict)  # it still answers
