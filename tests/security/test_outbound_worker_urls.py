"""Finding 6 (addresses): workers may not be registered where they could reach metadata services
or link-local hosts, nor outside an operator's allowlist.

Before the fix `POST /workers` accepted any URL, link-local and cloud-metadata addresses
included, and the gateway then probed it (and sent it requests with its key). Now such a URL is
400 `INVALID_WORKER_URL` at registration, a command-line one stops the gateway at start-up, and
every connect is checked again after DNS (see tests/core/test_worker_urls.py for the socket level).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from integration.conftest import REPO, Gateway, Launcher, Sim, free_port

from .hostile import hostile_worker

MESSAGES = [{"role": "user", "content": "where are you"}]


@pytest.fixture(scope="module")
def plain(module_launch: Launcher) -> Gateway:
    return module_launch.gateway([], ready=0)


def _refused(gw: Gateway, url: str) -> dict[str, Any]:
    before = gw.request("GET", "/workers").json()["total"]
    r = gw.request("POST", "/workers", {"url": url})
    assert r.status == 400, (url, r.status, r.body)
    body: dict[str, Any] = r.json()
    assert body["code"] == "INVALID_WORKER_URL" and isinstance(body["error"], str), body
    assert gw.request("GET", "/workers").json()["total"] == before
    return body


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254",
        "http://169.254.169.254:80/latest/meta-data",
        "http://169.254.170.2:80",
        "http://[fe80::1]:8000",
        "http://[::ffff:169.254.169.254]:80",
        "http://metadata.google.internal",
        "http://100.100.100.200",
        "grpc://[fd00:ec2::254]:50051",
        "http://0.0.0.0:8000",
        "http://224.0.0.1:8000",
    ],
)
def test_link_local_and_metadata_addresses_are_refused(plain: Gateway, url: str) -> None:
    body = _refused(plain, url)
    assert "may not be" in body["error"]


def test_a_name_resolving_to_a_denied_address_is_refused(launch: Launcher) -> None:
    # `localhost` resolves to loopback; with loopback on the denylist the name is refused too
    gw = launch.gateway([], ready=0, worker_url_denylist=["127.0.0.0/8", "::1/128"])
    body = _refused(gw, "http://localhost:8000")
    assert "resolves to" in body["error"]
    _refused(gw, "http://127.0.0.1:8000")


def test_the_allowlist_admits_only_its_ranges(launch: Launcher) -> None:
    sim: Sim = launch.sim("m")
    gw = launch.gateway([], ready=0, worker_url_allowlist=["127.0.0.0/8"])
    _refused(gw, "http://10.1.2.3:8000")
    _refused(gw, "http://[::1]:8000")
    _refused(gw, "http://169.254.169.254")  # an allowlist never reopens the metadata address
    r = gw.request("POST", "/workers", {"url": sim.url})
    assert r.status == 202, r.body
    gw.wait_ready(1)
    out = gw.client().chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
    assert out.choices[0].message.content


def test_a_denied_worker_is_never_contacted(launch: Launcher) -> None:
    # the hostile worker listens on 127.0.0.1; denied, it must never see a single request
    with hostile_worker("m") as worker:
        gw = launch.gateway([], ready=0, worker_url_denylist=["127.0.0.1/32"])
        _refused(gw, worker.url)
        _refused(gw, worker.url.replace("127.0.0.1", "localhost"))
        r = gw.request("POST", "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
        assert r.status == 404, r.body
        assert worker.all_seen() == []


@pytest.mark.integration  # starts `smg launch`
@pytest.mark.parametrize(
    "flags",
    [
        ["--worker-urls", "http://169.254.169.254:80"],
        ["--worker-urls", "http://127.0.0.1:9", "--worker-url-allowlist", "10.0.0.0/8"],
        ["--worker-url-denylist", "not-a-cidr"],
        ["--pd-disaggregation", "--prefill", "http://[fe80::1]:8000", "--decode", "http://a:1"],
    ],
)
def test_a_refused_command_line_worker_stops_the_gateway_at_start(flags: list[str]) -> None:
    argv = [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1"]
    argv += ["--port", str(free_port()), "--prometheus-port", "0", *flags]
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=30, text=True)
    except subprocess.TimeoutExpired:
        pytest.fail("the gateway started with a worker URL it must refuse")
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.strip().splitlines() if ln]
    assert len(lines) == 1, done.stderr  # one clear line, no traceback
    assert "worker-url" in lines[0], lines[0]
