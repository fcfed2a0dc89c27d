"""Circuit breakers over real processes: 5xx opens one, the open timeout lets a trial through,
a good trial closes it; 429 (the worker's back-pressure) never opens it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .conftest import Gateway, Launcher, Sim, wait_until

CLOSED, OPEN, HALF_OPEN = 0.0, 1.0, 2.0
BODY = {"model": "m", "messages": [{"role": "user", "content": "breaker"}], "max_tokens": 2}


@dataclass
class Pair:
    gw: Gateway
    a: Sim  # the one the tests break
    b: Sim

    def cb_state(self, sim: Sim) -> float | None:
        return self.gw.metric("smg_worker_cb_state", worker=sim.url)

    def send(self, n: int) -> list[int]:
        return [self.gw.request("POST", "/v1/chat/completions", BODY).status for _ in range(n)]

    def requests(self) -> tuple[int, int]:
        return self.a.stats()["requests"], self.b.stats()["requests"]


@pytest.fixture(scope="module")
def pair(module_launch: Launcher) -> Iterator[Pair]:
    a, b = module_launch.sims("m", "m")
    gw = module_launch.gateway(
        [a, b],
        cb_failure_threshold=3,
        cb_timeout_duration_secs=2,
        cb_success_threshold=1,
        disable_retries=True,
    )
    p = Pair(gw, a, b)
    yield p


def test_5xx_opens_the_breaker_and_a_good_trial_closes_it(pair: Pair) -> None:
    a, b = pair.a, pair.b
    assert pair.cb_state(a) == CLOSED
    a.configure(status_override=500)
    try:
        statuses = pair.send(6)  # round robin: three go to a and fail
        assert sorted(statuses) == [200, 200, 200, 500, 500, 500], statuses
        wait_until(lambda: pair.cb_state(a) == OPEN, 2.0, "a's breaker open")
        assert pair.cb_state(b) == CLOSED
        assert pair.gw.worker_by_url(a.url)["circuit_breaker"] == "open"

        a_before, b_before = pair.requests()
        assert pair.send(6) == [200] * 6  # everything goes to b now
        a_after, b_after = pair.requests()
        assert a_after == a_before
        assert b_after == b_before + 6
    finally:
        a.configure(status_override=None)

    # Past the open timeout the breaker lets a trial through; it succeeds and closes it.
    wait_until(lambda: pair.cb_state(a) == HALF_OPEN, 4.0, "a's breaker half-open", 0.1)
    a_before, _ = pair.requests()
    assert pair.send(4) == [200] * 4
    assert pair.requests()[0] - a_before >= 1
    wait_until(lambda: pair.cb_state(a) == CLOSED, 2.0, "a's breaker closed again")
    a_before, b_before = pair.requests()
    assert pair.send(4) == [200] * 4
    a_after, b_after = pair.requests()
    assert (a_after - a_before, b_after - b_before) == (2, 2)  # back in the rotation


def test_429_does_not_open_the_breaker(pair: Pair) -> None:
    a, b = pair.a, pair.b
    wait_until(lambda: pair.cb_state(a) == CLOSED, 5.0, "a's breaker closed")
    a.configure(status_override=429)
    try:
        a_before, _ = pair.requests()
        statuses = pair.send(12)  # six to a: twice the failure threshold
        assert sorted(statuses) == [200] * 6 + [429] * 6, statuses
        assert pair.requests()[0] == a_before + 6
        assert pair.cb_state(a) == CLOSED
        # a still gets its share: nothing was opened behind our back
        a_before, _ = pair.requests()
        assert sorted(pair.send(4)) == [200, 200, 429, 429]
        assert pair.requests()[0] == a_before + 2
        assert pair.cb_state(a) == CLOSED and pair.cb_state(b) == CLOSED
        assert pair.gw.worker_by_url(a.url)["circuit_breaker"] == "closed"
    finally:
        a.configure(status_override=None)
