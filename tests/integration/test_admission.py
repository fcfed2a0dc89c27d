"""Admission control: a bounded number of permits, a bounded queue with a deadline, and a permit
held until the response body (a stream included) has ended."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import openai
import pytest

from .conftest import Gateway, Launcher, Sim, wait_until

pytestmark = pytest.mark.serial  # times queue deadlines in windows of a second

MSGS = [{"role": "user", "content": "admission"}]
TOKENS_PER_S = 10  # the sim answers max_tokens=N in (N - 1) / 10 s


@dataclass
class Setup:
    sim: Sim
    no_queue: Gateway  # 1 permit, no queue
    queue: Gateway  # 1 permit, one queue slot, 1 s queue deadline
    pool: ThreadPoolExecutor


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    sim = module_launch.sim("m", tokens_per_second=TOKENS_PER_S)
    no_queue = module_launch.gateway([sim], max_concurrent_requests=1, queue_size=0)
    queue = module_launch.gateway(
        [sim], max_concurrent_requests=1, queue_size=1, queue_timeout_secs=1
    )
    with ThreadPoolExecutor(4) as pool:
        yield Setup(sim, no_queue, queue, pool)


def chat(gw: Gateway, seconds: float) -> str:
    """A request the sim takes about `seconds` to answer."""
    with gw.client() as client:
        out = client.chat.completions.create(
            model="m", messages=MSGS, max_tokens=round(seconds * TOKENS_PER_S) + 1
        )
    return out.choices[0].message.content or ""


def start(s: Setup, gw: Gateway, seconds: float) -> Future[str]:
    """Start a slow request in the background; return once it is running on the worker."""
    before = s.sim.stats()["requests"]
    fut = s.pool.submit(chat, gw, seconds)
    wait_until(lambda: s.sim.stats()["requests"] > before, 5.0, "the slow request on the worker")
    return fut


def expect_error(gw: Gateway, status: int, code: str) -> float:
    started = time.monotonic()
    with gw.client() as client, pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=MSGS, max_tokens=2)
    assert info.value.status_code == status, info.value
    assert info.value.code == code, info.value.body
    return time.monotonic() - started


def test_no_queue_answers_429_while_the_permit_is_taken(setup: Setup) -> None:
    gw = setup.no_queue
    slow = start(setup, gw, 1.0)
    assert expect_error(gw, 429, "admission_queue_full") < 0.9  # at once, not after the slow one
    assert slow.result(timeout=10)
    assert chat(gw, 0.0)  # the permit came back


def test_a_stream_holds_the_permit_until_its_body_ends(setup: Setup) -> None:
    gw = setup.no_queue
    with gw.client() as client:
        stream = client.chat.completions.create(
            model="m", messages=MSGS, max_tokens=15, stream=True
        )
        it = iter(stream)
        next(it)  # headers and the first chunk are in: the gateway is relaying the body
        assert gw.metric("smg_http_requests_in_flight") == 1.0
        expect_error(gw, 429, "admission_queue_full")
        rest = list(it)
        assert [c.choices[0].finish_reason for c in rest if c.choices[0].finish_reason] == [
            "length"
        ]
    wait_until(lambda: gw.metric("smg_http_requests_in_flight") == 0.0, 2.0, "permit released")
    assert chat(gw, 0.0)


def test_a_client_leaving_mid_stream_frees_the_permit(setup: Setup) -> None:
    gw, sim = setup.no_queue, setup.sim
    cancelled = sim.stats()["cancelled_streams"]
    with gw.client() as client:
        stream = client.chat.completions.create(
            model="m", messages=MSGS, max_tokens=100, stream=True
        )
        next(iter(stream))
        assert gw.metric("smg_http_requests_in_flight") == 1.0
        stream.close()  # hang up with 95+ tokens to go
    # The gateway drops the upstream at once and gives the permit back.
    wait_until(lambda: sim.stats()["cancelled_streams"] > cancelled, 3.0, "the sim to see it")
    wait_until(lambda: gw.metric("smg_http_requests_in_flight") == 0.0, 3.0, "permit released")
    assert sim.stats()["in_flight"] == 0
    assert chat(gw, 0.0)


def test_queued_request_times_out_with_408(setup: Setup) -> None:
    gw = setup.queue
    slow = start(setup, gw, 2.5)
    queued = setup.pool.submit(expect_error, gw, 408, "admission_queue_timeout")
    wait_until(lambda: gw.metric("smg_http_requests_queued") == 1.0, 2.0, "a queued request")
    expect_error(gw, 429, "admission_queue_full")  # the one queue slot is taken
    waited = queued.result(timeout=5)
    assert 0.9 <= waited < 2.0, waited  # the 1 s queue deadline, not the slow request's 2.5 s
    assert slow.result(timeout=10)


def test_queued_request_that_gets_the_permit_in_time_succeeds(setup: Setup) -> None:
    gw = setup.queue
    slow = start(setup, gw, 0.5)
    started = time.monotonic()
    queued = setup.pool.submit(chat, gw, 0.0)
    wait_until(lambda: gw.metric("smg_http_requests_queued") == 1.0, 2.0, "a queued request")
    assert queued.result(timeout=5)
    assert slow.result(timeout=5)
    assert time.monotonic() - started >= 0.2  # it did wait for the slow request
    assert gw.metric("smg_http_requests_queued") == 0.0
