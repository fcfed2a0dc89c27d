"""Prefill/decode disaggregation over gRPC with real processes: a PD gateway in front of a
prefill-role and a decode-role simulated engine, SGLang style (bootstrap rendezvous, both legs
at once) and vLLM style (prefill first, its KV-transfer params handed to the decode)."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import openai
import pytest

from .conftest import Gateway, Launcher, drive_pd_requests, wait_completed, wait_until

BOOTSTRAP_PORT = 8998
MESSAGES = [{"role": "user", "content": "hello grpc pd"}]
RUNTIMES = ("sglang", "vllm")


def _pd(launch: Launcher, runtime: str, **decode_options: Any) -> tuple:
    prefill = launch.engine(runtime=runtime, role="prefill", bootstrap_port=BOOTSTRAP_PORT)
    decode = launch.engine(runtime=runtime, role="decode", **decode_options)
    gw = launch.gateway(prefill=[(prefill, BOOTSTRAP_PORT)], decode=[decode])
    return gw, prefill, decode


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pd_grpc_streaming_and_non_streaming(launch: Launcher, runtime: str) -> None:
    gw, prefill, decode = _pd(launch, runtime)
    drive_pd_requests(gw, MESSAGES)

    p, d = wait_completed(3, prefill, decode)
    assert d["pd_requests"] == 3 and d["rejected"] == 0
    assert p["pd_requests"] == 3
    # the Rust gateway's PD series: TTFT of the streamed one; vLLM's sequential legs timed
    labels = {"backend_type": "pd", "runtime": runtime}
    assert gw.metric("smg_pd_ttft_seconds_count", **labels) == 1
    legs = 3 if runtime == "vllm" else None
    assert gw.metric("smg_pd_prefill_duration_seconds_count", **labels) == legs
    assert gw.metric("smg_pd_kv_transfer_duration_seconds_count", **labels) == legs
    assert gw.metric("smg_pd_kv_connector_mode_total", mode="nixl") == legs


def test_a_slow_sglang_prefill_runs_to_its_end_after_the_client_hangs_up(
    launch: Launcher,
) -> None:
    """SGLang's legs run at once: a prefill slower than the decode (here 1 s a token against
    none) is still running when the client has its whole streamed answer and hangs up (the
    OpenAI SDK closes after [DONE]). The gateway lets it end: not aborted, its worker settled."""
    prefill = launch.engine(
        runtime="sglang", role="prefill", bootstrap_port=BOOTSTRAP_PORT, decode_ms_per_token=1000
    )
    decode = launch.engine(runtime="sglang", role="decode")
    gw = launch.gateway(prefill=[(prefill, BOOTSTRAP_PORT)], decode=[decode])
    stream = gw.client().chat.completions.create(
        model="sim-model", messages=MESSAGES, max_tokens=3, stream=True
    )
    chunks = list(stream)  # read to [DONE], then the SDK closes the connection
    assert chunks[-1].choices[0].finish_reason == "length"
    # the prefill needs 2 s or more: it cannot have ended with the answer; had the hang-up
    # cancelled it, the engine would count it cancelled (or never see it: not completed)
    p, _ = wait_completed(1, prefill, decode, timeout_s=20)
    assert p["cancelled"] == 0 and p["abort_requests"] == 0


async def _read_sse(gw: Gateway, path: str, body: dict[str, Any]) -> tuple[list[Any], int]:
    """POST `body` as a streaming client does (aiohttp, reading the body as it arrives): the
    SSE events (parsed JSON, or "[DONE]") and how many reads the body took."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(gw.url + path, json=body, headers=gw.auth()) as resp,
    ):
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers["X-SMG-Prefill-Worker-Id"] != resp.headers["X-SMG-Routed-Worker-Id"]
        raw, reads = b"", 0
        async for chunk in resp.content.iter_any():
            raw, reads = raw + chunk, reads + 1
    events = [
        line[6:] if line == "data: [DONE]" else json.loads(line[6:])
        for line in raw.decode().splitlines()
        if line.startswith("data: ")
    ]
    return events, reads


def _pd_legs(prefill: Any, decode: Any, n: int) -> None:
    """Both engines served `n` PD legs (bootstrap room or KV params on each), refused none."""
    p, d = wait_completed(n, prefill, decode)
    assert d["pd_requests"] == n and d["rejected"] == 0, d
    assert p["pd_requests"] == n and p["rejected"] == 0, p


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_generate_runs_through_pd(launch: Launcher, runtime: str) -> None:
    """SGLang's /generate in gRPC PD mode goes through the pair like chat: each request is a
    prefill leg and a decode leg, and the client gets the decode's answer in SGLang's shape,
    whole and streamed, from text or from token ids."""
    gw, prefill, decode = _pd(launch, runtime, decode_ms_per_token=20)
    body = {
        "model": "sim-model",
        "text": "SIM_REPLY: hello 世界",
        "sampling_params": {"max_new_tokens": 32},
    }
    r = gw.request("POST", "/generate", body)
    assert r.status == 200, r
    out = r.json()
    assert out["text"] == "hello 世界"
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert out["meta_info"]["completion_tokens"] == len(out["output_ids"]) > 0
    assert out["meta_info"]["id"].startswith("req-")  # the gateway's engine id
    assert r.header("X-SMG-Prefill-Worker-Id") != r.header("X-SMG-Routed-Worker-Id")

    events, reads = asyncio.run(_read_sse(gw, "/generate", {**body, "stream": True}))
    assert events[-1] == "[DONE]" and len(events) >= 3, events
    last = events[-2]
    assert last["text"] == out["text"] and last["output_ids"] == out["output_ids"]
    assert last["meta_info"]["finish_reason"]["type"] == "stop"
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-2])
    assert reads >= 2, "streamed as the decode engine produced it, not in one piece"

    ids = gw.request("POST", "/v1/tokenize", {"model": "sim-model", "prompt": "abc def"})
    by_ids = {"model": "sim-model", "input_ids": ids.json()["tokens"]}
    r = gw.request("POST", "/generate", {**by_ids, "sampling_params": {"max_new_tokens": 5}})
    assert r.status == 200, r
    assert r.json()["meta_info"]["finish_reason"]["type"] == "length"
    assert r.json()["meta_info"]["completion_tokens"] == 5
    _pd_legs(prefill, decode, 3)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_completions_run_through_pd(launch: Launcher, runtime: str) -> None:
    """/v1/completions in gRPC PD mode (OpenAI SDK): a prompt as text, echoed; streamed with
    usage; a prompt of token ids. Each is one prefill leg and one decode leg."""
    gw, prefill, decode = _pd(launch, runtime)
    client = gw.client()
    prompt = "SIM_REPLY: hello 世界"
    done = client.completions.create(model="sim-model", prompt=prompt, max_tokens=32, echo=True)
    assert done.choices[0].text == prompt + "hello 世界"
    assert done.choices[0].finish_reason == "stop"
    assert done.id.startswith("cmpl-")

    chunks = list(
        client.completions.create(
            model="sim-model",
            prompt=prompt,
            max_tokens=32,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "hello 世界"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == done.usage.completion_tokens  # type: ignore[union-attr]

    ids = gw.request("POST", "/v1/tokenize", {"model": "sim-model", "prompt": "abc def"})
    by_ids = client.completions.create(model="sim-model", prompt=ids.json()["tokens"], max_tokens=3)
    assert by_ids.choices[0].finish_reason == "length"
    assert by_ids.usage is not None and by_ids.usage.completion_tokens == 3
    _pd_legs(prefill, decode, 3)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_responses_run_through_pd(launch: Launcher, runtime: str) -> None:
    """/v1/responses in gRPC PD mode (OpenAI SDK): the decode's events rendered as a response,
    whole and streamed alike, and a second turn through previous_response_id. Each request is
    one prefill leg and one decode leg."""
    gw, prefill, decode = _pd(launch, runtime)
    with gw.client(timeout_s=20) as client:
        whole = client.responses.create(model="sim-model", input="SIM_REPLY: hello 世界")
        assert whole.status == "completed" and whole.output_text == "hello 世界"
        with client.responses.stream(model="sim-model", input="SIM_REPLY: hello 世界") as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_response()
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
        assert streamed.output_text == "hello 世界" and streamed.usage == whole.usage

        second = client.responses.create(
            model="sim-model", input="SIM_REPLY: again", previous_response_id=whole.id
        )
        assert second.output_text == "again" and second.previous_response_id == whole.id
        assert second.usage is not None and whole.usage is not None
        assert second.usage.input_tokens > whole.usage.input_tokens  # the first turn came along
    _pd_legs(prefill, decode, 3)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_decode_engine_refuses_requests_without_pd_fields(launch: Launcher, runtime: str) -> None:
    decode = launch.engine(runtime=runtime, role="decode")
    gw = launch.gateway([decode])  # a plain gateway: no PD fields are sent
    with pytest.raises(openai.BadRequestError):
        gw.client().chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=4)
    assert decode.stats()["rejected"] == 1


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_prefill_engine_killed_is_a_clean_error(launch: Launcher, runtime: str) -> None:
    gw, prefill, decode = _pd(launch, runtime)
    prefill.kill()
    started = time.monotonic()
    r = gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": "sim-model", "messages": MESSAGES, "max_tokens": 4},
        timeout_s=10,
    )
    assert time.monotonic() - started < 5
    assert r.status in (502, 503), r
    code = r.json()["error"]["code"]
    assert code in ("pd_prefill_failed", "no_prefill_worker"), r
    wait_until(lambda: decode.stats()["in_flight"] == 0, 5, "no decode leg left in flight")


def test_sglang_bootstrap_port_comes_from_get_server_info(launch: Launcher) -> None:
    """`--prefill URL` with no port: the gateway asks the prefill's GetServerInfo for SGLang's
    `disaggregation_bootstrap_port` and names it to the decode (which refuses port 0)."""
    prefill = launch.engine(runtime="sglang", role="prefill", bootstrap_port=BOOTSTRAP_PORT + 1)
    decode = launch.engine(runtime="sglang", role="decode")
    gw = launch.gateway(prefill=[(prefill, None)], decode=[decode])
    drive_pd_requests(gw, MESSAGES)
    (d,) = wait_completed(3, decode)
    assert d["last_bootstrap_port"] == BOOTSTRAP_PORT + 1
    assert d["pd_requests"] == 3 and d["rejected"] == 0


def test_sglang_prefill_without_a_bootstrap_port_is_a_clean_error(launch: Launcher) -> None:
    prefill = launch.engine(runtime="sglang", role="prefill")  # reports port 0: none
    decode = launch.engine(runtime="sglang", role="decode")
    gw = launch.gateway(prefill=[(prefill, None)], decode=[decode])
    r = gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": "sim-model", "messages": MESSAGES, "max_tokens": 4},
        timeout_s=10,
    )
    assert r.status == 502, r
    err = r.json()["error"]
    assert err["code"] == "pd_prefill_failed" and "bootstrap" in err["message"], err
    assert decode.stats()["pd_requests"] == 0, "no decode leg without a rendezvous"
    assert gw.metric("smg_pd_bootstrap_failures_total") == 1


def test_readiness_503_without_a_prefill_engine(launch: Launcher) -> None:
    gw, prefill, _decode = _pd(launch, "sglang")
    assert gw.request("GET", "/readiness").status == 200
    prefill.kill()

    def prefill_missing() -> bool:
        r = gw.request("GET", "/readiness")
        return r.status == 503 and "prefill" in r.json()["reason"]

    wait_until(prefill_missing, 10, "readiness 503 naming prefill")


@pytest.mark.parametrize("retries", [True, False], ids=["retries", "no-retries"])
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_prefill_killed_mid_request(launch: Launcher, runtime: str, retries: bool) -> None:
    """SIGKILL the prefill engine a (non-streamed) PD request is on: with retries the request
    is served through the other prefill; without, the client gets a clean OpenAI-shaped 502
    fast. Never a hang; the gateway stays up and the following requests (round robin still
    lists the dead prefill: health checks are slowed down) go through the other prefill."""
    slow = {"prefill_tokens_per_s": 20}  # a ~40-token prompt: ~2 s in prefill
    prefill = {"role": "prefill", "bootstrap_port": BOOTSTRAP_PORT, **slow}
    p1 = launch.start_engine("sim-model", runtime, **prefill)
    p2 = launch.start_engine("sim-model", runtime, **prefill)
    d = launch.start_engine("sim-model", runtime, role="decode", decode_ms_per_token=50)
    for e in (p1, p2, d):
        launch.wait_engine(e)
    gw = launch.gateway(
        prefill=[(p1, BOOTSTRAP_PORT), (p2, BOOTSTRAP_PORT)],
        decode=[d],
        health_failure_threshold=100,  # health checks must not hide the dead engine
        disable_retries=not retries,
    )
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "word " * 40}],
        "max_tokens": 20,
    }
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(gw.request, "POST", "/v1/chat/completions", body, timeout_s=20)
        wait_until(
            lambda: p1.stats()["in_flight"] + p2.stats()["in_flight"] == 1, 5, "a prefill leg"
        )
        victim, other = (p1, p2) if p1.stats()["in_flight"] else (p2, p1)
        victim.kill()
        killed = time.monotonic()
        r = fut.result(timeout=15)
    elapsed = time.monotonic() - killed
    assert (r.status == 200) is retries, r
    if retries:  # retried onto the other prefill: nothing had been sent yet
        assert elapsed < 8, "a retry: one more slow prefill (~3 s) and the decode"
        assert r.json()["choices"][0]["message"]["content"]
        assert other.stats()["pd_requests"] == 1
    else:
        assert elapsed < 3, "a clean error, fast"
        assert r.status == 502, r
        err = r.json()["error"]
        assert err["code"] == "pd_prefill_failed" and err["type"], err
    wait_until(lambda: d.stats()["in_flight"] == 0, 5, "no decode leg left in flight")

    assert gw.request("GET", "/health").status == 200
    # the retried call's prefill leg counts itself completed once its last message is sent,
    # which may be after the client's answer: wait for it to settle before taking the count
    settled = wait_until(lambda: (s := other.stats())["in_flight"] == 0 and s, 5, "other settled")
    before = settled["completed"]
    statuses = []
    for i in range(3):  # round robin lands on the dead prefill at least once
        again = {**body, "messages": [{"role": "user", "content": f"again {i}"}], "max_tokens": 2}
        out = gw.request("POST", "/v1/chat/completions", again, timeout_s=20)
        statuses.append(out.status)
        if out.status != 200:
            assert out.json()["error"]["code"] == "pd_prefill_failed", out
    if retries:
        assert statuses == [200] * 3
    else:  # no retry: the dead prefill fails fast until health checks or the breaker drop it
        assert 200 in statuses
    wait_completed(before + statuses.count(200), other)
