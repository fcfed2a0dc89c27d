"""Finding 10: a rotating `x-tenant-id` header bypassed per-tenant rate limits (each new value was
a new bucket).

The rate limiter's caller is now the tenant of the credential (`request["principal"]`): a tenant
key's tenant, a hash of the shared key, `loopback`. `x-smg-tenant-id` counts only with
`--trust-tenant-header`, and never moves a tenant key out of its own bucket.

Windows are 60 s long (3 requests each: 0.05/s), aligned to the wall clock; a test that may have
crossed a window boundary while exhausting a bucket allows for the second window.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from integration.conftest import Gateway, Launcher, Sim, assert_openai_error

from .auth_support import CHAT, KEY, bearer

RATE = {"rate_limit_tokens_per_second": 0.05, "rate_limit_window_secs": 60}
PER_WINDOW = 3
TENANTS = [["red:red-key-0123456789"], ["blue:blue-key-0123456789"]]


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim("m")


def _chat(gw: Gateway, headers: dict[str, str]) -> int:
    r = gw.request("POST", "/v1/chat/completions", CHAT, headers=headers, auth=False)
    if r.status != 200:
        assert_openai_error(r, 429, "rate_limit_exceeded")
    return r.status


def exhaust(gw: Gateway, headers_of: Callable[[int], dict[str, str]], most: int = 12) -> int:
    """Send until one is refused: how many were admitted (`most` + 1 when none was)."""
    for i in range(most + 1):
        if _chat(gw, headers_of(i)) == 429:
            return i
    return most + 1


def test_rotating_tenant_headers_share_the_key_bucket(launch: Launcher, sim: Sim) -> None:
    """Only flags the old gateway had: `--api-key` and the rate limit."""
    gw = launch.gateway([sim], api_key=KEY, **RATE)
    admitted = exhaust(
        gw,
        lambda i: {**bearer(KEY), "x-tenant-id": f"tenant-{i}", "x-smg-tenant-id": f"t{i}"},
    )
    assert admitted <= 2 * PER_WINDOW, f"{admitted} admitted: the headers picked new buckets"


def test_each_tenant_key_has_its_own_bucket(launch: Launcher, sim: Sim) -> None:
    gw = launch.gateway([sim], api_key=KEY, tenant_api_key=TENANTS, **RATE)
    red, blue = bearer("red-key-0123456789"), bearer("blue-key-0123456789")
    # red cannot leave its bucket by naming another tenant (the header is not trusted)
    assert exhaust(gw, lambda i: {**red, "x-smg-tenant-id": f"blue-{i}"}) <= 2 * PER_WINDOW
    assert _chat(gw, blue) == 200 and _chat(gw, bearer(KEY)) == 200  # their own buckets


def test_trusted_header_picks_the_bucket(launch: Launcher, sim: Sim) -> None:
    """Behind a proxy that sets it (`--trust-tenant-header`), the header names the tenant of
    shared-key and keyless callers; a tenant key stays in its own bucket."""
    opts = {"tenant_api_key": TENANTS, "trust_tenant_header": True, **RATE}
    gw = launch.gateway([sim], api_key=KEY, **opts)
    k = bearer(KEY)
    assert exhaust(gw, lambda i: {**k, "x-smg-tenant-id": "team-a"}) <= 2 * PER_WINDOW
    assert _chat(gw, {**k, "x-smg-tenant-id": "team-b"}) == 200  # another tenant's bucket
    red = bearer("red-key-0123456789")
    assert exhaust(gw, lambda i: {**red, "x-smg-tenant-id": f"r{i}"}) <= 2 * PER_WINDOW
