"""The worker address policy (pure) and its socket-level guard (loopback only)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg.core.worker_urls import (
    AddressPolicy,
    DeniedWorkerUrl,
    InvalidWorkerUrl,
    WorkerUrl,
    parse_worker_url,
)
from smg.pipeline.backends.address_guard import AddressGuard, DeniedAddress

DEFAULT = AddressPolicy()


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("http://10.0.0.1:8000", WorkerUrl("http", "10.0.0.1", 8000)),
        ("http://Worker.Example:8000/", WorkerUrl("http", "worker.example", 8000)),
        ("https://w.example", WorkerUrl("https", "w.example", 443)),
        ("http://w.example", WorkerUrl("http", "w.example", 80)),
        ("http://[::1]:9000", WorkerUrl("http", "::1", 9000)),
        ("grpc://127.0.0.1:50051", WorkerUrl("grpc", "127.0.0.1", 50051)),
        ("grpcs://engine.internal.:443", WorkerUrl("grpcs", "engine.internal", 443)),
        ("http://proxy:8080/base/path", WorkerUrl("http", "proxy", 8080)),
    ],
)
def test_parse_accepts(url: str, parsed: WorkerUrl) -> None:
    assert parse_worker_url(url) == parsed


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "empty"),
        ("ftp://x:1", "must start with"),
        ("10.0.0.1:8000", "must start with"),
        ("http://", "no host"),
        ("http://user:pw@host:1", "credentials"),
        ("http://host:1/?q=1", "query"),
        ("http://host:1/#frag", "fragment"),
        ("grpc://host", "needs a port"),
        ("grpc://host:1/path", "no path"),
        ("http://host:99999", "malformed"),
        ("http://host:0", "port 0"),
    ],
)
def test_parse_rejects(url: str, says: str) -> None:
    with pytest.raises(InvalidWorkerUrl) as info:
        parse_worker_url(url)
    assert not isinstance(info.value, DeniedWorkerUrl)
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("169.254.169.254", "cloud metadata"),
        ("169.254.170.2", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("192.0.0.192", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("0.0.0.0", "this network"),
        ("0.1.2.3", "this network"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("::ffff:169.254.169.254", "cloud metadata"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", "cloud metadata"),  # 6to4 of 169.254.169.254
        ("not-an-ip", "not an IP"),
    ],
)
def test_default_denies(address: str, why: str) -> None:
    reason = DEFAULT.denied(address)
    assert reason is not None and why in reason, reason


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.9.9.9", "::1", "10.1.2.3", "172.16.0.5", "192.168.1.1", "fd12::1",
     "100.64.0.1", "8.8.8.8", "2001:db8::1", "::ffff:10.0.0.1"],
)  # fmt: skip
def test_default_allows_loopback_private_and_public(address: str) -> None:
    assert DEFAULT.denied(address) is None


def test_allowlist_narrows_and_denials_still_win() -> None:
    policy = AddressPolicy(allow=["10.0.0.0/8", "::1/128", "169.254.0.0/16"])
    assert policy.denied("10.2.3.4") is None
    assert policy.denied("::1") is None
    assert policy.denied("::ffff:10.2.3.4") is None
    assert "allowlist" in (policy.denied("127.0.0.1") or "")
    assert "allowlist" in (policy.denied("192.168.0.1") or "")
    # an allowlisted range never reopens link-local or metadata
    assert "metadata" in (policy.denied("169.254.169.254") or "")
    assert "link-local" in (policy.denied("169.254.3.3") or "")


def test_denylist_adds_to_the_defaults() -> None:
    policy = AddressPolicy(deny=["10.66.0.0/16", "fd99::/16"])
    assert "denylist" in (policy.denied("10.66.1.1") or "")
    assert "denylist" in (policy.denied("fd99::5") or "")
    assert policy.denied("10.67.1.1") is None
    assert policy.denied("169.254.169.254") is not None


@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "banana", "10.0.0.1/8/8"])
def test_malformed_cidr_names_the_flag(cidr: str) -> None:
    with pytest.raises(ValueError, match="--worker-url-allowlist"):
        AddressPolicy(allow=[cidr])
    with pytest.raises(ValueError, match="--worker-url-denylist"):
        AddressPolicy(deny=[cidr])


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest",
        "http://[fe80::1]:80",
        "http://metadata.google.internal",
        "http://METADATA.google.internal.:80",
        "grpc://[::ffff:169.254.169.254]:50051",
        "http://0.0.0.0:8000",
    ],
)
def test_check_refuses_denied_urls_without_dns(url: str) -> None:
    with pytest.raises(DeniedWorkerUrl):
        DEFAULT.check(url)


@given(st.integers(0, 2**16 - 1), st.sampled_from(["", "::ffff:", "64:ff9b::"]))
def test_the_whole_link_local_range_is_denied_in_every_form(low: int, form: str) -> None:
    v4 = f"169.254.{low >> 8}.{low & 255}"
    assert DEFAULT.denied(form + v4) is not None


@given(st.integers(0, 2**24 - 1))
def test_the_whole_10_slash_8_is_allowed(low: int) -> None:
    assert DEFAULT.denied(f"10.{low >> 16}.{(low >> 8) & 255}.{low & 255}") is None


# --- the guard on real sockets (loopback) -------------------------------------------------------


def test_socket_factory_refuses_denied_addresses() -> None:
    guard = AddressGuard()
    info = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))
    with pytest.raises(DeniedAddress):
        guard.socket_factory(info)
    ok = guard.socket_factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    ok.close()


async def test_check_resolves_names_and_refuses_a_denied_answer() -> None:
    # `localhost` resolves to loopback: allowed by default, refused by an allowlist without it
    assert (await AddressGuard().check("http://localhost:8000")).host == "localhost"
    with pytest.raises(DeniedWorkerUrl, match="resolves to"):
        await AddressGuard(AddressPolicy(allow=["10.0.0.0/8"])).check("http://localhost:8000")
    # a name that does not resolve passes (the connect-time check still holds)
    await AddressGuard().check("http://no-such-host.invalid:8000")


async def test_open_socket_connects_only_to_allowed_addresses() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        sock = await AddressGuard().open_socket("127.0.0.1", port)
        sock.close()
        refusing = AddressGuard(AddressPolicy(deny=["127.0.0.0/8"]))
        with pytest.raises(DeniedAddress):
            await refusing.open_socket("127.0.0.1", port)
        with pytest.raises(DeniedAddress):
            await AddressGuard().open_socket("metadata.google.internal", 80)
    finally:
        server.close()
        await server.wait_closed()


async def test_the_aiohttp_connector_checks_every_connect_after_dns() -> None:
    """DNS rebinding: a name is judged by the address it resolves to when the connection is
    made, not when the worker was registered."""
    import aiohttp
    from aiohttp import web

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        for policy, reachable in (
            (AddressPolicy(), True),
            (AddressPolicy(deny=["127.0.0.0/8", "::1/128"]), False),
        ):
            guard = AddressGuard(policy)
            connector = aiohttp.TCPConnector(socket_factory=guard.socket_factory)
            async with aiohttp.ClientSession(connector=connector) as session:
                for host in ("localhost", "127.0.0.1"):
                    url = f"http://{host}:{port}/health"
                    if reachable:
                        async with session.get(url) as resp:
                            assert resp.status == 200
                    else:
                        with pytest.raises(aiohttp.ClientConnectorError) as info:
                            await session.get(url)
                        assert "worker address policy" in str(info.value)
    finally:
        await runner.cleanup()
