"""Finding 14: what a worker sends back is bounded in size and in silence, and one deadline
covers a whole request.

Before the fix an endless worker body grew the gateway to 1.17 GB in 12 s, a stalled stream
held its client (and admission permit) for the full 1,800 s request timeout, and a worker that
never answered was retried 5 times, each attempt with the full timeout.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psutil
import pytest
from integration.conftest import Gateway, Launcher

from .clients import NoEnd, bounded_request
from .hostile import hostile_worker

pytestmark = pytest.mark.serial  # measures memory and deadlines

MESSAGES = [{"role": "user", "content": "how big"}]
LIMIT = 80 << 20  # RSS growth allowed while one answer is cut at the default 32 MiB cap


def _ask_watching_rss(gw: Gateway, body: dict[str, Any], limit: int) -> tuple[int, bytes]:
    """Send `body` (in a thread) while watching the gateway's RSS: fail as soon as it has grown
    by `limit` (the unbounded read grew ~100 MB per second: do not wait for it to finish).
    Returns (status, body)."""
    proc = psutil.Process(gw.proc.popen.pid)
    baseline = proc.memory_info().rss
    answer: list[tuple[int, dict[str, str], bytes]] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            answer.append(bounded_request(gw.port, "/v1/chat/completions", body))
        except BaseException as exc:  # NoEnd, or the socket closed under it
            errors.append(exc)

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    grew = 0
    while t.is_alive():
        grew = max(grew, proc.memory_info().rss - baseline)
        if grew > limit:
            pytest.fail(f"gateway RSS grew by {grew / 1e6:.0f} MB reading one answer")
        time.sleep(0.02)
    if errors:
        raise errors[0]
    status, _, raw = answer[0]
    return status, raw


def test_an_endless_body_is_cut_at_the_cap_and_memory_stays_bounded(launch: Launcher) -> None:
    # default --max-upstream-response-bytes (32 MiB)
    with hostile_worker("m", "endless") as worker:
        gw = launch.gateway([worker.url], disable_retries=True, cb_failure_threshold=2)
        for stream in (False, True):  # a JSON answer to a stream request is read whole too
            body = {"model": "m", "messages": MESSAGES, "stream": stream}
            status, raw = _ask_watching_rss(gw, body, LIMIT)
            assert status == 502 and b"upstream_response_too_large" in raw, raw[:300]
        # the cut counts as the worker's failure: two of them opened its breaker
        w = gw.worker_by_url(worker.url)
        assert w is not None and w["circuit_breaker"] == "open", w


def test_the_cap_is_a_knob(launch: Launcher) -> None:
    with hostile_worker("m", "endless") as worker:
        gw = launch.gateway([worker.url], max_upstream_response_bytes=1 << 20)
        body = {"model": "m", "messages": MESSAGES}
        status, raw = _ask_watching_rss(gw, body, 16 << 20)
        assert status == 502 and b"(1048576 bytes)" in raw, raw[:300]


def test_a_stalled_stream_is_cut_after_the_idle_timeout(launch: Launcher) -> None:
    with hostile_worker("m", "stall") as worker:
        gw = launch.gateway([worker.url], upstream_idle_timeout_secs=1, disable_retries=True)
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        started = time.monotonic()
        status, _, raw = bounded_request(gw.port, "/v1/chat/completions", body, deadline_s=30)
        elapsed = time.monotonic() - started
        assert status == 200
        assert b"first " in raw and b"upstream_timeout" in raw and b"[DONE]" in raw, raw[-400:]
        assert elapsed >= 0.9, elapsed  # not before the limit


def test_a_live_stream_is_never_cut_by_the_idle_timeout(launch: Launcher) -> None:
    sim = launch.sim("m", tokens_per_second=10)  # a token every 100 ms for 3 s
    gw = launch.gateway([sim], upstream_idle_timeout_secs=1)
    client = gw.client(timeout_s=30.0)
    chunks = list(
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=30, stream=True)
    )
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_worker_that_never_answers_gets_one_attempt_within_the_deadline(
    launch: Launcher,
) -> None:
    with hostile_worker("m", "hang") as a, hostile_worker("m", "hang") as b:
        gw = launch.gateway(
            [a.url, b.url], request_timeout_secs=3, retry_max_retries=5, retry_initial_backoff_ms=10
        )
        started = time.monotonic()
        try:
            status, _, raw = bounded_request(
                gw.port, "/v1/chat/completions", {"model": "m", "messages": MESSAGES}
            )
        except NoEnd:
            pytest.fail("no answer at all")
        elapsed = time.monotonic() - started
        assert status == 504 and b"upstream_timeout" in raw, raw[:300]
        # one attempt: the deadline is the request's, and a timeout is not retried (before:
        # five attempts of 3 s each, alternating between the two workers)
        assert len(a.data_requests()) + len(b.data_requests()) == 1
        assert elapsed < 9.0, elapsed


def test_pd_grpc_prefill_retry_shares_the_deadline(launch: Launcher) -> None:
    # two prefill engines too slow to finish within the request timeout: the first attempt
    # spends the whole deadline, so the other prefill is never tried (before: a second full
    # timeout on it)
    slow = {"prefill_tokens_per_s": 1.0}
    p1 = launch.start_engine("sim-model", "vllm", role="prefill", **slow)
    p2 = launch.start_engine("sim-model", "vllm", role="prefill", **slow)
    decode = launch.engine(runtime="vllm", role="decode")
    p1, p2 = launch.wait_engine(p1), launch.wait_engine(p2)
    gw = launch.gateway(prefill=[(p1, None), (p2, None)], decode=[decode], request_timeout_secs=3)
    status, _, raw = bounded_request(
        gw.port, "/v1/chat/completions", {"model": "sim-model", "messages": MESSAGES}
    )
    assert status in (502, 504), raw[:300]
    assert p1.stats()["requests"] + p2.stats()["requests"] == 1
