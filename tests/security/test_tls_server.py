"""The gateway's own listeners over TLS (`--tls-cert-path`, `--tls-key-path`), on real processes.

Certificates are made at test time (trustme). The `openai` SDK, trusting the test CA, is served
over TLS (plain and streamed); a plaintext request to the TLS port gets no HTTP answer; a client
that does not trust the CA fails verification; the metrics listener uses the same certificate.
A half-configured or unusable certificate stops `smg launch` at start-up with one clear line.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
from collections.abc import Callable

import openai
import pytest
from integration.conftest import REPO, Gateway, Launcher, free_port, http
from support.tls_certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def gw(module_launch: Launcher, pki: Pki) -> Gateway:
    sim = module_launch.sim()  # a plaintext worker behind a TLS gateway
    return module_launch.gateway(
        [sim],
        tls_cert_path=pki.server.cert,
        tls_key_path=pki.server.key,
        context=pki.client_context(present_cert=False),
    )


MESSAGES = [{"role": "user", "content": "hello over TLS"}]


def test_openai_sdk_is_served_over_tls(gw: Gateway) -> None:
    assert gw.url.startswith("https://")
    client = gw.client()
    done = client.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=5)
    assert done.choices[0].message.content and done.usage and done.usage.completion_tokens == 5
    chunks = list(
        client.chat.completions.create(
            model="sim-model", messages=MESSAGES, max_tokens=4, stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert [m.id for m in client.models.list()] == ["sim-model"]


def test_the_tls_listener_negotiates_tls12_or_later_and_http11(gw: Gateway, pki: Pki) -> None:
    ctx = pki.client_context(present_cert=False)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        assert tls.selected_alpn_protocol() == "http/1.1"
        tls.sendall(b"GET /liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert tls.recv(64).startswith(b"HTTP/1.1 200")


def test_plaintext_to_the_tls_port_gets_no_http_answer(gw: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        try:
            while chunk := s.recv(4096):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"HTTP/1" not in received and b"sim-model" not in received
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        http("GET", f"http://127.0.0.1:{gw.port}/v1/models", timeout_s=5)
    assert gw.proc.alive


def test_a_client_that_does_not_trust_the_ca_fails_verification(gw: Gateway) -> None:
    untrusting = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0, timeout=10)
    with pytest.raises(openai.APIConnectionError) as info:
        untrusting.chat.completions.create(model="sim-model", messages=MESSAGES, max_tokens=2)
    chain: list[BaseException] = []
    exc: BaseException | None = info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any("CERTIFICATE_VERIFY_FAILED" in str(e) for e in chain), chain
    assert gw.request("GET", "/liveness").status == 200  # and the gateway serves on


def test_the_metrics_listener_uses_the_same_certificate(gw: Gateway) -> None:
    assert any(name == "smg_http_requests_total" for name, _, _ in gw.metrics())  # over https
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        http("GET", f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout_s=5)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        http(
            "GET",
            f"https://127.0.0.1:{gw.metrics_port}/metrics",
            context=ssl.create_default_context(),
        )


# --- start-up errors ---------------------------------------------------------------------------


def _launch_fails(*flags: str) -> str:
    """Run `smg launch` with `flags`; it must exit non-zero at once; its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMG_")}
    done = subprocess.run(
        [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(free_port()),
         "--prometheus-port", "0", *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0, done
    return done.stderr.strip()


@pytest.mark.integration  # starts `smg launch`
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (lambda p: ["--tls-cert-path", p.server.cert], "--tls-cert-path needs --tls-key-path"),
        (lambda p: ["--tls-key-path", p.server.key], "--tls-key-path needs --tls-cert-path"),
        (
            lambda p: ["--tls-cert-path", p.server.cert, "--tls-key-path", p.client.key],
            "--tls-key-path .*client.key is not the key of --tls-cert-path .*server.pem",
        ),
        (
            lambda p: ["--tls-cert-path", p.server.cert, "--tls-key-path", f"{p.server.key}x"],
            "--tls-key-path .*server.keyx: cannot read it",
        ),
        (
            lambda p: ["--client-cert-path", p.client.cert],
            "--client-cert-path needs --client-key-path",
        ),
        (
            lambda p: ["--ca-cert-paths", p.ca_path, p.client.key],
            "--ca-cert-paths .*client.key: no PEM certificate",
        ),
    ],
    ids=["cert-only", "key-only", "wrong-key", "missing-key", "client-cert-only", "ca-not-cert"],
)
def test_an_unusable_tls_config_stops_start_up_with_one_line(
    pki: Pki, flags: Callable[[Pki], list[object]], message: str
) -> None:
    stderr = _launch_fails(*map(str, flags(pki)))
    assert len(stderr.splitlines()) == 1, stderr  # one line, no traceback
    assert stderr.startswith("smg: error: "), stderr
    assert re.search(message, stderr), (message, stderr)


@pytest.mark.integration  # starts `smg sim`
def test_sim_refuses_a_half_configured_certificate(pki: Pki) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMG_")}
    for extra in ([], ["--grpc"]):
        done = subprocess.run(
            [sys.executable, "-m", "smg", "sim", *extra, "--port", str(free_port()),
             "--tls-client-ca-path", str(pki.ca_path)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0
        assert "--tls-client-ca-path needs --tls-cert-path" in done.stderr
