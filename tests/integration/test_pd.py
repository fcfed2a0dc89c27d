"""Prefill/decode disaggregation over HTTP with real processes: a gateway in PD mode in front of a
prefill-role sim (with a bootstrap port) and a decode-role sim."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import openai
import pytest

from .conftest import (
    Launcher,
    assert_openai_error,
    drive_pd_requests,
    wait_completed,
    wait_until,
)

BOOTSTRAP_PORT = 8998
MESSAGES = [{"role": "user", "content": "hello pd"}]


def _pd(launch: Launcher, **sim_options: object) -> tuple:
    prefill = launch.sim(role="prefill", bootstrap_port=BOOTSTRAP_PORT, **sim_options)
    decode = launch.sim(role="decode", **sim_options)
    gw = launch.gateway(prefill=[(prefill, BOOTSTRAP_PORT)], decode=[decode])
    return gw, prefill, decode


def _rooms(sim) -> dict[str, int]:
    return sim.stats()["rooms"]


def test_pd_non_streaming_and_streaming_share_rooms(launch: Launcher) -> None:
    gw, prefill, decode = _pd(launch)
    drive_pd_requests(gw, MESSAGES)

    wait_completed(3, prefill, decode)
    p_rooms, d_rooms = _rooms(prefill), _rooms(decode)
    assert len(d_rooms) == 3 and p_rooms == d_rooms
    assert all(0 <= int(r) < 2**63 for r in d_rooms)


def test_decode_sim_rejects_requests_without_bootstrap(launch: Launcher) -> None:
    decode = launch.sim(role="decode")
    gw = launch.gateway([decode])  # a plain gateway: no bootstrap fields are injected
    r = gw.request("POST", "/v1/chat/completions", {"model": "sim-model", "messages": MESSAGES})
    assert_openai_error(r, 400, "invalid_value", param="bootstrap_room")


def test_prefill_dead_before_request_is_a_clean_502(launch: Launcher) -> None:
    gw, prefill, decode = _pd(launch)
    prefill.kill()
    started = time.monotonic()
    r = gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": "sim-model", "messages": MESSAGES},
        timeout_s=10,
    )
    assert time.monotonic() - started < 5
    if r.status == 502:
        assert_openai_error(r, 502, "pd_prefill_failed")
    else:  # the health check noticed first: no prefill worker is routable
        assert_openai_error(r, 503, "no_prefill_worker")
    wait_until(lambda: decode.stats()["in_flight"] == 0, 5, "no decode leg left in flight")


@pytest.mark.parametrize("stream", [False, True])
def test_prefill_killed_mid_request_fails_fast(launch: Launcher, stream: bool) -> None:
    gw, prefill, decode = _pd(launch, first_token_ms=30_000)
    client = gw.client(timeout_s=20)
    errors: list[BaseException] = []
    finished = threading.Event()

    def call() -> None:
        try:
            out = client.chat.completions.create(
                model="sim-model", messages=MESSAGES, max_tokens=4, stream=stream
            )
            if stream:
                for _ in out:
                    pass
        except Exception as exc:
            errors.append(exc)
        finally:
            finished.set()

    t = threading.Thread(target=call, daemon=True)
    t.start()
    wait_until(lambda: prefill.stats()["in_flight"] == 1, 5, "the prefill leg to arrive")
    prefill.kill()
    assert finished.wait(5), "the client hung after the prefill worker died"
    t.join(1)
    assert len(errors) == 1
    err = errors[0]
    assert isinstance(err, openai.APIError)
    body = getattr(err, "body", None)
    code = body.get("code") if isinstance(body, dict) else None
    assert code == "pd_prefill_failed" or "pd_prefill_failed" in str(err), err
    # the decode leg was cancelled: nothing stays in flight there
    wait_until(lambda: decode.stats()["in_flight"] == 0, 5, "the decode leg to be cancelled")


def test_readiness_needs_both_roles(launch: Launcher) -> None:
    gw, prefill, decode = _pd(launch)
    assert gw.request("GET", "/readiness").status == 200
    decode.set_healthy(False)

    def not_ready() -> bool:
        r = gw.request("GET", "/readiness")
        return r.status == 503 and "decode" in r.json()["reason"]

    wait_until(not_ready, 10, "readiness 503 naming decode")
    decode.set_healthy(True)
    prefill.set_healthy(False)

    def prefill_missing() -> bool:
        r = gw.request("GET", "/readiness")
        return r.status == 503 and "prefill" in r.json()["reason"]

    wait_until(prefill_missing, 10, "readiness 503 naming prefill")
    prefill.set_healthy(True)
    wait_until(lambda: gw.request("GET", "/readiness").status == 200, 10, "readiness 200")


def test_workers_api_takes_worker_type_and_bootstrap_port(launch: Launcher) -> None:
    prefill = launch.sim(role="prefill", bootstrap_port=BOOTSTRAP_PORT)
    decode = launch.sim(role="decode")
    gw = launch.gateway(ready=0, pd_disaggregation=True)
    assert gw.request("GET", "/readiness").status == 503
    for sim, wtype, port in ((prefill, "prefill", BOOTSTRAP_PORT), (decode, "decode", None)):
        body = {"url": sim.url, "worker_type": wtype, "bootstrap_port": port}
        assert gw.request("POST", "/workers", body).status == 202
    bad = {"url": "http://127.0.0.1:1", "worker_type": "prefill", "bootstrap_port": "x"}
    assert gw.request("POST", "/workers", bad).status == 400
    gw.wait_ready(2)
    by_url = {w["url"]: w for w in gw.workers()}
    assert by_url[prefill.url]["worker_type"] == "prefill"
    assert by_url[prefill.url]["bootstrap_port"] == BOOTSTRAP_PORT
    assert by_url[decode.url]["worker_type"] == "decode"
    assert by_url[decode.url]["bootstrap_port"] is None
    stats = gw.request("GET", "/workers").json()["stats"]
    assert stats["prefill_count"] == 1 and stats["decode_count"] == 1
    done = gw.client().chat.completions.create(model="sim-model", messages=MESSAGES)
    assert done.choices[0].message.content
    assert _rooms(prefill) == _rooms(decode) and len(_rooms(decode)) == 1


def test_generate_runs_through_pd_over_http(launch: Launcher) -> None:
    """SGLang's /generate in HTTP PD mode goes through the pair like chat: both workers see the
    request with one shared bootstrap room (the decode worker refuses one without), the prefill
    leg is cut to one token, and the client gets the decode worker's answer, whole and streamed."""
    gw, prefill, decode = _pd(launch)
    body = {"model": "sim-model", "text": "hello pd", "sampling_params": {"max_new_tokens": 6}}
    r = gw.request("POST", "/generate", body)
    assert r.status == 200, r
    out = r.json()
    assert out["text"] and out["meta_info"]["completion_tokens"] == 6, out
    assert out["meta_info"]["finish_reason"] == {"type": "length"}
    assert r.header("X-SMG-Prefill-Worker-Id") != r.header("X-SMG-Routed-Worker-Id")

    r = gw.request("POST", "/generate", {**body, "stream": True})
    assert r.status == 200, r
    lines = [ln[6:] for ln in r.body.decode().splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]" and len(lines) == 6 + 1, lines
    events = [json.loads(ln) for ln in lines[:-1]]
    assert events[-1]["text"] == out["text"]  # cumulative, as SGLang streams it
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])

    wait_completed(2, prefill, decode)
    p_rooms, d_rooms = _rooms(prefill), _rooms(decode)
    assert len(d_rooms) == 2 and p_rooms == d_rooms


def test_responses_run_through_http_pd_pairs(launch: Launcher) -> None:
    """/v1/responses on a model served by HTTP PD pairs: both legs get the chat body with one
    shared room, and the decode's chat answer is rendered as a Responses object, whole and
    streamed alike; a second turn through previous_response_id carries the first along."""
    gw, prefill, decode = _pd(launch)
    with gw.client(timeout_s=20) as client:
        args: dict[str, Any] = {"model": "sim-model", "input": "hello pd", "instructions": "Hi."}
        whole = client.responses.create(**args)
        assert whole.status == "completed" and whole.output_text.strip()
        [msg] = whole.output
        assert msg.type == "message" and msg.id.startswith("msg_")
        assert whole.usage is not None and whole.usage.output_tokens > 0
        with client.responses.stream(**args) as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_response()
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
        assert streamed.output_text == whole.output_text  # the sim answers a prompt alike
        assert streamed.usage == whole.usage

        second = client.responses.create(
            model="sim-model", input="and again", previous_response_id=whole.id
        )
        alone = client.responses.create(model="sim-model", input="and again", store=False)
        assert second.previous_response_id == whole.id and second.status == "completed"
        assert second.usage is not None and alone.usage is not None
        assert second.usage.input_tokens > alone.usage.input_tokens  # the first turn came along
        assert client.responses.retrieve(second.id).output_text == second.output_text

    wait_completed(4, prefill, decode)
    p_rooms, d_rooms = _rooms(prefill), _rooms(decode)
    assert len(d_rooms) == 4 and p_rooms == d_rooms


@pytest.mark.parametrize("killed", ["prefill", "decode"])
def test_a_leg_killed_mid_responses_stream_ends_it_as_failed(launch: Launcher, killed: str) -> None:
    """A rendered (Responses) stream under way (the decode talking, the prefill still busy)
    whose prefill or decode worker dies: the stream ends at once with the renderer's
    `response.failed`, and the other leg is cancelled (while the client's connection stays
    open: its leaving is not what ends the other leg)."""
    prefill = launch.sim(role="prefill", bootstrap_port=BOOTSTRAP_PORT, first_token_ms=30_000)
    decode = launch.sim(role="decode", tokens_per_second=4)
    gw = launch.gateway(prefill=[(prefill, BOOTSTRAP_PORT)], decode=[decode])
    kinds: list[str] = []
    failed: list[Any] = []
    talking, finished = threading.Event(), threading.Event()

    with gw.client(timeout_s=20) as client:

        def call() -> None:
            try:
                args: dict[str, Any] = {"model": "sim-model", "input": "hi", "stream": True}
                for event in client.responses.create(**args, max_output_tokens=200):
                    kinds.append(event.type)
                    if event.type == "response.output_text.delta":
                        talking.set()
                    if event.type == "response.failed":
                        failed.append(event.response)
            finally:
                finished.set()

        t = threading.Thread(target=call, daemon=True)
        t.start()
        assert talking.wait(10), "the decode leg's first words"
        dead, other = (prefill, decode) if killed == "prefill" else (decode, prefill)
        dead.kill()
        assert finished.wait(5), f"the client hung after the {killed} worker died"
        t.join(1)
        wait_until(lambda: other.stats()["in_flight"] == 0, 5, "the other leg to be cancelled")
    assert kinds[-1] == "response.failed", kinds
    [response] = failed
    assert response.status == "failed" and response.error is not None
    assert response.error.code == "server_error"
    if killed == "prefill":
        assert "prefill" in response.error.message
