"""A worker that is not up when the gateway starts (an engine started together with it, as in
compose or Kubernetes) is served within seconds of coming up, with the default health settings
(a 60 s interval, two good checks needed): the gateway rechecks a worker that is not ready with
backoff (0.5 s doubling up to 2 s), not once a minute."""

from __future__ import annotations

import time

import pytest

from .conftest import Launcher, free_port, http

pytestmark = pytest.mark.integration


def test_a_worker_down_at_start_serves_within_seconds_of_coming_up(launch: Launcher) -> None:
    port = free_port()
    gw = launch.gateway(
        [f"http://127.0.0.1:{port}"],
        ready=0,
        health_check_interval_secs=60,  # the defaults, which the launcher otherwise shortens
        health_success_threshold=2,
    )
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}
    assert http("POST", f"{gw.url}/v1/chat/completions", body).status in (404, 502, 503)
    time.sleep(6.0)  # down for a while: the backoff has reached its cap
    launch.sim(port=port)
    up = time.monotonic()
    while http("POST", f"{gw.url}/v1/chat/completions", body).status != 200:
        assert time.monotonic() - up < 5.0, "not served within 5 s of the worker coming up"
        time.sleep(0.05)
