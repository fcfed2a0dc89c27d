"""gRPC over mutual TLS (`grpcs://` URLs), on real processes: simulated vLLM and SGLang engines
serving gRPC over TLS and requiring a client certificate signed by the test CA (certificates made
at test time with trustme).

With the right CA and client certificate the gateway detects each engine's runtime, checks its
health, fetches its tokenizer (GetTokenizer, no --model-path) and serves the `openai` SDK through
the lean HTTP/2 client, streamed and not, all over TLS (the engines accept nothing else). With
another CA, without the client certificate, or with a plaintext `grpc://` URL the engines never
become ready, requests are answered in the API's shape (never a 500) and the gateway keeps
running.
"""

from __future__ import annotations

import time

import pytest
from integration.conftest import Engine, Launcher, assert_openai_error
from support.tls_certs import Pki, make_pki

MESSAGES = [{"role": "user", "content": "SIM_REPLY:hello over grpcs"}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def engines(module_launch: Launcher, pki: Pki) -> list[Engine]:
    tls = {
        "tls_cert_path": pki.server.cert,
        "tls_key_path": pki.server.key,
        "tls_client_ca_path": pki.ca_path,
    }
    started = [
        module_launch.start_engine("tls-model", runtime, **tls) for runtime in ("vllm", "sglang")
    ]
    return [module_launch.wait_engine(e, **tls) for e in started]


def test_grpcs_engines_serve_chat_over_mutual_tls(
    launch: Launcher, engines: list[Engine], pki: Pki
) -> None:
    assert all(e.url.startswith("grpcs://") for e in engines)
    before = [e.stats()["requests"] for e in engines]
    gw = launch.gateway(engines, **pki.gateway_flags())  # ready: runtime, health, tokenizer
    assert {w["model_id"] for w in gw.workers()} == {"tls-model"}
    client = gw.client()
    for _ in range(2):  # round robin: each engine serves one of each
        done = client.chat.completions.create(model="tls-model", messages=MESSAGES)
        assert done.choices[0].message.content == "hello over grpcs"
        chunks = list(
            client.chat.completions.create(model="tls-model", messages=MESSAGES, stream=True)
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "hello over grpcs"
    after = [e.stats()["requests"] for e in engines]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 2]


@pytest.mark.parametrize("case", ["wrong_ca", "no_client_cert", "plaintext_url"])
def test_an_engine_that_fails_tls_is_unhealthy_never_a_500(
    launch: Launcher, engines: list[Engine], pki: Pki, case: str
) -> None:
    flags = pki.gateway_flags(
        ca=pki.other_ca_path if case == "wrong_ca" else None, cert=case != "no_client_cert"
    )
    urls = [e.url for e in engines]
    if case == "plaintext_url":
        urls = [u.replace("grpcs://", "grpc://") for u in urls]
    before = [e.stats()["requests"] for e in engines]
    gw = launch.gateway([], ready=0, **flags)
    for url in urls:
        added = gw.request("POST", "/workers", {"url": url, "model_id": "tls-model"})
        assert added.status == 202, added
    time.sleep(2.5)  # a few health checks (one a second), all failing
    assert len(gw.workers()) == 2
    assert all(w["status"] != "ready" for w in gw.workers()), gw.workers()
    r = gw.request("POST", "/v1/chat/completions", {"model": "tls-model", "messages": MESSAGES})
    assert_openai_error(r, 503, "no_available_workers")
    assert gw.request("GET", "/readiness").status == 503
    assert gw.request("GET", "/liveness").status == 200 and gw.proc.alive
    assert [e.stats()["requests"] for e in engines] == before
