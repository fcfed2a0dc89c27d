"""Mutual TLS to HTTP workers (`https://` URLs with `--ca-cert-paths`, `--client-cert-path`,
`--client-key-path`), on real processes: simulated workers serving HTTPS that require a client
certificate signed by the test CA (certificates made at test time with trustme).

With the right CA and client certificate the worker is probed, its model discovered and the
`openai` SDK is served through it (plain, streamed, completions). Without the client certificate,
trusting another CA, facing a certificate for another host name, or with an http:// URL, the
worker never becomes ready (requests for its model get 503 `no_available_workers`, readiness 503,
never a 500) and the gateway keeps running; a worker whose certificate stops verifying while it is
marked ready costs a 502 `upstream_connection_error`.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from integration.conftest import (
    Launcher,
    Sim,
    assert_openai_error,
    free_port,
)
from support.tls_certs import Pki, make_pki

MESSAGES = [{"role": "user", "content": "hello over mutual TLS"}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def mtls_sim(launch: Launcher, pki: Pki, *, wrong_host: bool = False, **options: Any) -> Sim:
    pair = pki.wrong_host if wrong_host else pki.server
    context = pki.client_context()
    if wrong_host:
        context.check_hostname = False  # the test itself still reaches it by address
    return launch.sim(
        tls_cert_path=pair.cert,
        tls_key_path=pair.key,
        tls_client_ca_path=pki.ca_path,
        context=context,
        **options,
    )


def test_mtls_worker_serves_through_the_gateway(launch: Launcher, pki: Pki) -> None:
    sim = mtls_sim(launch, pki)
    assert sim.url.startswith("https://")
    gw = launch.gateway([sim], **pki.gateway_flags())  # ready: /health and /v1/models over mTLS
    assert gw.workers()[0]["model_id"] == "sim-model"
    client = gw.client()
    done = client.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=5)
    assert done.usage is not None and done.usage.completion_tokens == 5
    chunks = list(
        client.chat.completions.create(
            model="sim-model", messages=MESSAGES, max_tokens=4, stream=True
        )
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    assert client.completions.create(model="sim-model", prompt="abc", max_tokens=3).choices[0].text
    assert sim.stats()["requests"] >= 3


@pytest.mark.parametrize("case", ["no_client_cert", "wrong_ca", "wrong_host", "plaintext_url"])
def test_a_worker_that_fails_tls_is_unhealthy_never_a_500(
    launch: Launcher, pki: Pki, case: str
) -> None:
    sim = mtls_sim(launch, pki, wrong_host=case == "wrong_host")
    flags = pki.gateway_flags(
        ca=pki.other_ca_path if case == "wrong_ca" else None, cert=case != "no_client_cert"
    )
    url = sim.url.replace("https://", "http://") if case == "plaintext_url" else sim.url
    gw = launch.gateway([], ready=0, **flags)
    added = gw.request("POST", "/workers", {"url": url, "model_id": "sim-model"})
    assert added.status == 202, added
    time.sleep(2.5)  # a few health checks (one a second), all failing
    worker = gw.workers()[0]
    assert worker["status"] != "ready", worker
    r = gw.request("POST", "/v1/chat/completions", {"model": "sim-model", "messages": MESSAGES})
    assert_openai_error(r, 503, "no_available_workers")
    assert gw.request("GET", "/readiness").status == 503
    assert gw.request("GET", "/liveness").status == 200 and gw.proc.alive
    assert sim.stats()["requests"] == 0  # nothing reached the worker


def test_a_ready_worker_whose_tls_breaks_costs_a_502(launch: Launcher, pki: Pki) -> None:
    """The worker is replaced, on the same port, by one whose certificate the gateway does not
    trust, while the gateway still has it as ready (health checks a minute apart)."""
    port = free_port()
    first = mtls_sim(launch, pki, port=port)
    gw = launch.gateway(
        [first], disable_retries=True, health_check_interval_secs=60, **pki.gateway_flags()
    )
    client = gw.client()
    assert client.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=2)
    first.kill()
    other = make_pki(launch.tmp / "other-pki")
    impostor = launch.sim(
        port=port,
        tls_cert_path=other.server.cert,
        tls_key_path=other.server.key,
        context=other.client_context(present_cert=False),
    )
    assert impostor.url == first.url
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 502
    r = gw.request("POST", "/v1/chat/completions", {"model": "sim-model", "messages": MESSAGES})
    assert_openai_error(r, 502, "upstream_connection_error")
    assert gw.proc.alive and impostor.stats()["requests"] == 0
