"""Finding 18: a client that leaves is never a failure of the worker.

The attack (and the shared bench's outage): a crowd of streaming clients reset their connections
in the middle of the answer, as load generators do at the end of a run. Before the fix each one
counted as a failure of the worker serving it, so a healthy worker's circuit breaker opened and
every request failed until the breaker's timeout. Here 64 clients leave mid-stream, three rounds
in a row, on every path (HTTP relay, gRPC stream, PD over HTTP and over gRPC); then ordinary
requests must all succeed and the breaker must still be closed.
"""

from __future__ import annotations

from typing import Any

from integration.conftest import Gateway, Launcher, wait_until

from .clients import crowd_leaves
from .hostile import hostile_worker

CROWD = 64
ROUNDS = 3
MESSAGES = [{"role": "user", "content": "a long answer, please"}]
BREAKER = {"cb_failure_threshold": 5, "cb_timeout_duration_secs": 600}  # open would stay open


def _stream_body(model: str) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "max_tokens": 400, "stream": True}


def _crowds_leave(gw: Gateway, model: str) -> None:
    for _ in range(ROUNDS):
        got = crowd_leaves(gw.port, "/v1/chat/completions", _stream_body(model), CROWD)
        started = [g for g in got if b"data:" in g]
        assert len(started) == CROWD, [g[:200] for g in got if b"data:" not in g][:3]


def _still_serving(gw: Gateway, model: str, urls: list[str]) -> None:
    for url in urls:
        w = gw.worker_by_url(url)
        assert w is not None and w["circuit_breaker"] == "closed", w
    client = gw.client(timeout_s=30.0)
    for _ in range(10):
        out = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4)
        assert out.choices[0].message.content
    chunks = list(
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, stream=True)
    )
    assert chunks and chunks[-1].choices[0].finish_reason == "length"
    for url in urls:
        w = gw.worker_by_url(url)
        assert w is not None and w["circuit_breaker"] == "closed", w


def test_http_relay_clients_leaving_midstream_do_not_open_the_breaker(launch: Launcher) -> None:
    sim = launch.sim("m", tokens_per_second=50)  # 400 tokens: an 8 s stream, cut after the first
    gw = launch.gateway([sim], **BREAKER)
    _crowds_leave(gw, "m")
    wait_until(lambda: sim.stats()["in_flight"] == 0, 20.0, "the worker to see the hang-ups")
    _still_serving(gw, "m", [sim.url])


def test_http_relay_clients_leaving_a_whole_answer_do_not_open_the_breaker(
    launch: Launcher,
) -> None:
    # the worker has sent its headers and is still sending the body when the clients go
    with hostile_worker("m", "slow_whole") as worker:
        gw = launch.gateway([worker.url], **BREAKER)
        body = {"model": "m", "messages": MESSAGES, "max_tokens": 4}
        for _ in range(ROUNDS):
            crowd_leaves(gw.port, "/v1/chat/completions", body, 16, wait_for=b"", wait_s=1.0)

        def breaker() -> str:
            w = gw.worker_by_url(worker.url)
            assert w is not None
            return str(w["circuit_breaker"])

        # every request reached the worker (an open breaker would have stopped them)
        wait_until(
            lambda: len(worker.data_requests()) == 16 * ROUNDS or breaker() != "closed",
            10.0,
            "every request at the worker",
        )
        assert breaker() == "closed"
        assert len(worker.data_requests()) == 16 * ROUNDS
        worker.mode = "ok"
        client = gw.client(timeout_s=30.0)
        for _ in range(10):
            out = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4)
            assert out.choices[0].message.content == "hello"


def test_grpc_stream_clients_leaving_midstream_do_not_open_the_breaker(launch: Launcher) -> None:
    engine = launch.engine("m", decode_ms_per_token=20)
    gw = launch.gateway([engine], **BREAKER)
    _crowds_leave(gw, "m")
    wait_until(lambda: engine.stats()["in_flight"] == 0, 20.0, "the engine to drop the calls")
    _still_serving(gw, "m", [engine.url])


def test_pd_http_clients_leaving_midstream_do_not_open_the_breakers(launch: Launcher) -> None:
    prefill = launch.sim(role="prefill", bootstrap_port=8998)
    decode = launch.sim(role="decode", tokens_per_second=50)
    gw = launch.gateway(prefill=[(prefill, 8998)], decode=[decode], **BREAKER)
    _crowds_leave(gw, "sim-model")
    wait_until(lambda: decode.stats()["in_flight"] == 0, 20.0, "the decode worker to see them go")
    _still_serving(gw, "sim-model", [prefill.url, decode.url])


def test_pd_grpc_clients_leaving_midstream_do_not_open_the_breakers(launch: Launcher) -> None:
    prefill = launch.engine(runtime="sglang", role="prefill", bootstrap_port=8998)
    decode = launch.engine(runtime="sglang", role="decode", decode_ms_per_token=20)
    gw = launch.gateway(prefill=[(prefill, 8998)], decode=[decode], **BREAKER)
    _crowds_leave(gw, "sim-model")
    wait_until(lambda: decode.stats()["in_flight"] == 0, 20.0, "the decode engine to drop them")
    _still_serving(gw, "sim-model", [prefill.url, decode.url])
