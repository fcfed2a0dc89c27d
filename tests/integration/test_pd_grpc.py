"""Prefill/decode disaggregation over gRPC with real processes: a PD gateway in front of a
prefill-role and a decode-role simulated engine, SGLang style (bootstrap rendezvous, both legs
at once) and vLLM style (prefill first, its KV-transfer params handed to the decode)."""

from __future__ import annotations

import time

import openai
import pytest

from .conftest import Launcher, drive_pd_requests, wait_until

BOOTSTRAP_PORT = 8998
MESSAGES = [{"role": "user", "content": "hello grpc pd"}]
RUNTIMES = ("sglang", "vllm")


def _pd(launch: Launcher, runtime: str) -> tuple:
    prefill = launch.engine(runtime=runtime, role="prefill", bootstrap_port=BOOTSTRAP_PORT)
    decode = launch.engine(runtime=runtime, role="decode")
    gw = launch.gateway(prefill=[(prefill, BOOTSTRAP_PORT)], decode=[decode])
    return gw, prefill, decode


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pd_grpc_streaming_and_non_streaming(launch: Launcher, runtime: str) -> None:
    gw, prefill, decode = _pd(launch, runtime)
    drive_pd_requests(gw, MESSAGES)

    p, d = prefill.stats(), decode.stats()
    assert d["pd_requests"] == 3 and d["completed"] == 3 and d["rejected"] == 0
    assert p["pd_requests"] == 3 and p["completed"] == 3


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


def test_readiness_503_without_a_prefill_engine(launch: Launcher) -> None:
    gw, prefill, _decode = _pd(launch, "sglang")
    assert gw.request("GET", "/readiness").status == 200
    prefill.kill()

    def prefill_missing() -> bool:
        r = gw.request("GET", "/readiness")
        return r.status == 503 and "prefill" in r.json()["reason"]

    wait_until(prefill_missing, 10, "readiness 503 naming prefill")
