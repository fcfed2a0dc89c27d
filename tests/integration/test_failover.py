"""Failures of the workers themselves: killed mid-load, refusing connections, never answering."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import openai
import pytest

from .conftest import Gateway, Launcher, Sim, assert_openai_error, kill_mid_stream, wait_until

MSGS = [{"role": "user", "content": "failover"}]


def test_killed_worker_requests_fail_over_to_the_other(launch: Launcher) -> None:
    a, b = launch.sims("m", "m", first_token_ms=100)
    gw = launch.gateway([a, b], retry_initial_backoff_ms=20, health_failure_threshold=1)
    done = 0
    lock = threading.Lock()
    enough = threading.Event()

    def one(client: openai.OpenAI) -> str:
        nonlocal done
        out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=4)
        with lock:
            done += 1
            if done >= 8:
                enough.set()
        return out.choices[0].message.content or ""

    with gw.client() as client, ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(one, client) for _ in range(40)]
        assert enough.wait(10.0), "the first requests did not complete"
        wait_until(lambda: a.stats()["in_flight"] > 0, 5.0, "a request in flight on the victim")
        served_by_a = a.stats()["completed"]
        a.kill()
        texts = [f.result(timeout=20.0) for f in futures]
    assert len(texts) == 40 and all(texts)
    # After the kill only b could answer (a may have finished one or two more just before it).
    served_by_b = b.stats()["completed"]
    assert 40 - served_by_a - 4 <= served_by_b <= 40 - served_by_a, (served_by_a, served_by_b)
    # Health checks mark the dead worker down.
    wait_until(
        lambda: gw.worker_by_url(a.url)["status"] != "ready", 10.0, "the dead worker not ready"
    )


def test_stream_from_killed_worker_ends_with_an_error_not_a_hang(launch: Launcher) -> None:
    a, b = launch.sims("m", "m", tokens_per_second=20)  # 100 tokens: a 5 s stream
    gw = launch.gateway([a, b])
    with gw.client() as client:
        stream = client.chat.completions.create(
            model="m", messages=MSGS, max_tokens=100, stream=True
        )
        it = iter(stream)
        first = next(it)
        assert first.choices[0].delta is not None
        _victim, other, received, elapsed, error = kill_mid_stream(it, a, b)
        assert elapsed < 3.0, elapsed
        assert received < 99  # it broke off: the stream did not run to its end
        assert error.code == "upstream_stream_error", error.body

        # The gateway itself is fine: the next request goes to the surviving worker.
        out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=3)
        assert out.choices[0].message.content
    assert other.stats()["completed"] >= 1


@dataclass
class Trio:
    gw: Gateway
    dead: Sim  # model "dead": killed by the test
    slow: Sim  # model "slow": never answers within the gateway's request timeout
    flaky: tuple[Sim, Sim]  # model "flaky": the first answers 503 to everything


@pytest.fixture(scope="module")
def trio(module_launch: Launcher) -> Iterator[Trio]:
    dead, slow, f1, f2 = module_launch.sims("dead", "slow", "flaky", "flaky")
    slow.configure(first_token_ms=20_000)
    gw = module_launch.gateway(
        [dead, slow, f1, f2],
        request_timeout_secs=1,
        retry_max_retries=2,
        retry_initial_backoff_ms=10,
        health_failure_threshold=2,
    )
    yield Trio(gw, dead, slow, (f1, f2))


def test_retryable_status_is_retried_on_the_other_worker(trio: Trio) -> None:
    bad, good = trio.flaky
    bad.configure(status_override=503)
    try:
        with trio.gw.client() as client:
            for _ in range(6):
                out = client.chat.completions.create(model="flaky", messages=MSGS, max_tokens=2)
                assert out.choices[0].message.content
        assert bad.stats()["failed"] >= 2  # round robin did send it some: each was retried
        assert good.stats()["completed"] == 6
        assert (trio.gw.metric("smg_worker_retries_total", worker=bad.url) or 0) >= 2
    finally:
        bad.configure(status_override=None)


def test_connection_refused_is_502_then_503_once_marked_down(trio: Trio) -> None:
    gw, dead = trio.gw, trio.dead
    body = {"model": "dead", "messages": MSGS}
    dead.kill()
    r = gw.request("POST", "/v1/chat/completions", body)
    if r.status == 502:
        assert_openai_error(r, 502, "upstream_connection_error")
    else:  # health checks were quicker than us
        assert_openai_error(r, 503, "no_available_workers")
    wait_until(
        lambda: gw.worker_by_url(dead.url)["status"] != "ready", 10.0, "the dead worker marked down"
    )
    r = gw.request("POST", "/v1/chat/completions", body)
    assert_openai_error(r, 503, "no_available_workers")
    assert r.header("retry-after") is not None
    # The other model's worker is untouched.
    assert gw.worker_by_url(trio.slow.url)["status"] == "ready"


def test_worker_that_never_answers_is_504(trio: Trio) -> None:
    started = time.monotonic()
    with trio.gw.client() as client, pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="slow", messages=MSGS, max_tokens=2)
    elapsed = time.monotonic() - started
    assert info.value.status_code == 504
    assert info.value.code == "upstream_timeout"
    # Two attempts of 1 s each (retries on the same, only worker): not the worker's 20 s.
    assert 0.9 <= elapsed < 5.0, elapsed
    wait_until(lambda: trio.slow.stats()["in_flight"] == 0, 5.0, "the sim to see the hang-ups")
