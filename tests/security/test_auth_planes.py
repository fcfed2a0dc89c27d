"""Finding 5: the admin plane (/workers, /get_loads, /parse/*, /mesh/*) was open by default on
0.0.0.0, and with `--api-key` the same key was both user and admin.

Now a plane without a credential answers loopback clients only (naming a loopback Host); the
control plane takes control-plane keys (roles admin/user) or JWTs, never a data-plane key; the
data plane never takes a control-plane key. Every gateway here binds 0.0.0.0 and is called at one
of the machine's own non-loopback addresses, so it sees a non-loopback peer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from integration.conftest import Gateway, Launcher, Sim, assert_openai_error, wait_until

from .auth_support import (
    ADMIN_KEY,
    CHAT,
    CP_KEYS,
    KEY,
    USER_KEY,
    at,
    bearer,
    flat_error,
    remote_address,
    watched_gateway,
)


@pytest.fixture(scope="module")
def addr() -> Iterator[str]:
    with remote_address() as a:
        yield a


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim("m")


@pytest.fixture(scope="module")
def keyless(module_launch: Launcher, sim: Sim) -> Gateway:
    """No credential at all, bound beyond loopback (the old default)."""
    return module_launch.gateway([sim], host="0.0.0.0", prometheus_host="0.0.0.0")


@pytest.fixture(scope="module")
def keyed(module_launch: Launcher, sim: Sim) -> Gateway:
    """`--api-key` only: a data-plane key, no control-plane credential."""
    return module_launch.gateway([sim], host="0.0.0.0", api_key=KEY)


@pytest.fixture(scope="module")
def roles(module_launch: Launcher, sim: Sim) -> Gateway:
    """A data-plane key and two control-plane keys (admin, user)."""
    return watched_gateway(
        module_launch,
        [sim],
        bearer(ADMIN_KEY),
        host="0.0.0.0",
        prometheus_host="0.0.0.0",
        api_key=KEY,
        control_plane_api_keys=CP_KEYS,
    )


def test_keyless_admin_plane_refuses_remote_peers(keyless: Gateway, addr: str) -> None:
    before = keyless.workers()
    r = flat_error(at(addr, keyless, "GET", "/workers"), 403, "LOOPBACK_ONLY")
    assert "--control-plane-api-keys" in r["error"] and "--jwt-issuer" in r["error"]
    added = at(addr, keyless, "POST", "/workers", {"url": "http://127.0.0.1:9"})
    flat_error(added, 403, "LOOPBACK_ONLY")
    flat_error(at(addr, keyless, "DELETE", f"/workers/{before[0]['id']}"), 403, "LOOPBACK_ONLY")
    flat_error(at(addr, keyless, "GET", f"/workers/{before[0]['id']}"), 403, "LOOPBACK_ONLY")
    assert_openai_error(at(addr, keyless, "GET", "/get_loads"), 403, "loopback_only")
    parse = {"text": "<think>a</think>b", "reasoning_parser": "deepseek_r1"}
    assert_openai_error(at(addr, keyless, "POST", "/parse/reasoning", parse), 403, "loopback_only")
    assert [w["id"] for w in keyless.workers()] == [w["id"] for w in before]  # nothing changed
    # the operator on the machine itself still administers it
    assert keyless.request("GET", "/get_loads").status == 200


def test_keyless_data_plane_and_metrics_answer_loopback_only(keyless: Gateway, addr: str) -> None:
    err = assert_openai_error(
        at(addr, keyless, "POST", "/v1/chat/completions", CHAT), 403, "loopback_only"
    )
    assert "--api-key" in err["message"] and "--allow-unauthenticated" in err["message"]
    assert_openai_error(at(addr, keyless, "GET", "/v1/models"), 403, "loopback_only")
    assert keyless.request("POST", "/v1/chat/completions", CHAT).status == 200
    metrics = at(addr, keyless, "GET", "/metrics", port=keyless.metrics_port)
    assert_openai_error(metrics, 403, "loopback_only")
    assert keyless.metric("smg_http_requests_total") is not None  # from loopback: served
    # public probes and unknown paths are what they were
    assert at(addr, keyless, "GET", "/health").status == 200
    assert at(addr, keyless, "GET", "/readiness").status == 200
    assert_openai_error(at(addr, keyless, "GET", "/no/such/route"), 404, "unknown_url")


@pytest.mark.parametrize("host", ["evil.example", "evil.example:30000", "192.0.2.77", "[fd00::9]"])
def test_dns_rebinding_host_is_not_trusted(keyless: Gateway, host: str) -> None:
    """A page on evil.example re-resolved to 127.0.0.1 reaches the loopback port, but its requests
    name its own host: loopback trust needs a loopback Host too."""
    hdrs = {"Host": host}
    flat_error(keyless.request("GET", "/workers", headers=hdrs), 403, "UNTRUSTED_HOST")
    r = keyless.request("POST", "/v1/chat/completions", CHAT, headers=hdrs)
    assert_openai_error(r, 403, "untrusted_host")
    for ok in (f"localhost:{keyless.port}", f"127.0.0.1:{keyless.port}", "LOCALHOST"):
        assert keyless.request("GET", "/workers", headers={"Host": ok}).status == 200


def test_a_request_relayed_by_a_local_proxy_is_not_local(keyless: Gateway) -> None:
    """A reverse proxy on the same host makes every client a loopback peer: a request it says
    it relayed gets no loopback trust."""
    for relayed in ({"X-Forwarded-For": "203.0.113.5"}, {"Forwarded": "for=203.0.113.5"}):
        flat_error(keyless.request("GET", "/workers", headers=relayed), 403, "LOOPBACK_ONLY")
        r = keyless.request("POST", "/v1/chat/completions", CHAT, headers=relayed)
        assert_openai_error(r, 403, "loopback_only")


def test_data_plane_key_is_not_an_admin_key(keyed: Gateway, addr: str) -> None:
    k = bearer(KEY)
    assert at(addr, keyed, "POST", "/v1/chat/completions", CHAT, headers=k).status == 200
    # the same key, from the same peer, on the control plane: refused
    flat_error(at(addr, keyed, "GET", "/workers", headers=k), 403, "LOOPBACK_ONLY")
    added = at(addr, keyed, "POST", "/workers", {"url": "http://127.0.0.1:9"}, headers=k)
    flat_error(added, 403, "LOOPBACK_ONLY")
    assert_openai_error(at(addr, keyed, "GET", "/get_loads", headers=k), 403, "loopback_only")
    # a path spelled to look like the data plane runs nothing of the control plane
    assert at(addr, keyed, "GET", "/v1/../workers", headers=k).status == 404
    # the key guards all of the data plane, /v1/models included, from loopback too
    assert at(addr, keyed, "GET", "/v1/models", headers=k).status == 200
    assert_openai_error(at(addr, keyed, "GET", "/v1/models"), 401, "invalid_api_key")
    r = keyed.request("POST", "/v1/chat/completions", CHAT, auth=False)
    assert_openai_error(r, 401, "invalid_api_key")


def test_admin_role_reaches_the_control_plane(
    roles: Gateway, addr: str, module_launch: Launcher
) -> None:
    admin = bearer(ADMIN_KEY)
    listed = at(addr, roles, "GET", "/workers", headers=admin)
    assert listed.status == 200 and listed.json()["total"] == 1
    spare = module_launch.sim("m")
    added = at(addr, roles, "POST", "/workers", {"url": spare.url}, headers=admin)
    assert added.status == 202, added.body
    wid = added.json()["worker_id"]
    assert at(addr, roles, "DELETE", f"/workers/{wid}", headers=admin).status == 202
    assert at(addr, roles, "GET", "/get_loads", headers=admin).status == 200


def test_user_role_and_other_credentials_are_refused(roles: Gateway, addr: str) -> None:
    r = flat_error(
        at(addr, roles, "GET", "/workers", headers=bearer(USER_KEY)), 403, "ADMIN_ROLE_REQUIRED"
    )
    assert r["error"] == "Admin role required for control plane access"
    data_key = at(addr, roles, "POST", "/workers", {"url": "http://x:1"}, headers=bearer(KEY))
    r = flat_error(data_key, 401, "INVALID_API_KEY")
    assert "data-plane" in r["error"]
    assert data_key.header("WWW-Authenticate") == 'Bearer realm="control-plane"'
    flat_error(at(addr, roles, "GET", "/workers", headers=bearer("guess")), 401, "INVALID_API_KEY")
    flat_error(at(addr, roles, "GET", "/workers"), 401, "INVALID_API_KEY")
    # with a control-plane credential configured, loopback is no longer trusted by itself
    flat_error(roles.request("GET", "/workers", auth=False), 401, "INVALID_API_KEY")
    flat_error(roles.request("GET", "/workers"), 401, "INVALID_API_KEY")  # the data key, locally
    # and control-plane keys do not open the data plane
    for key in (ADMIN_KEY, USER_KEY):
        r2 = at(addr, roles, "POST", "/v1/chat/completions", CHAT, headers=bearer(key))
        assert_openai_error(r2, 401, "invalid_api_key")


def test_metrics_take_a_control_plane_credential_of_any_role(roles: Gateway, addr: str) -> None:
    for key in (USER_KEY, ADMIN_KEY):
        r = at(addr, roles, "GET", "/metrics", headers=bearer(key), port=roles.metrics_port)
        assert r.status == 200 and b"smg_http_requests_total" in r.body
    for hdrs in ({}, bearer(KEY), bearer("guess")):
        r = at(addr, roles, "GET", "/metrics", headers=hdrs, port=roles.metrics_port)
        assert_openai_error(r, 401, "invalid_api_key")


@pytest.mark.parametrize("keys", [False, True], ids=["keyless", "control-plane keys"])
def test_metrics_of_several_processes_judge_the_scraper_not_the_parent(
    launch: Launcher, sim: Sim, addr: str, keys: bool
) -> None:
    """`--workers 2`: the parent gathers /metrics from its children over loopback, so the
    children cannot see who scrapes. The parent judges the scraper as one process does: a
    remote one without a control-plane credential is refused (403 keyless, 401 with keys), a
    loopback one (keyless) or one with a key (of any role) gets both processes' samples."""
    opts: dict[str, object] = {"host": "0.0.0.0", "prometheus_host": "0.0.0.0"}
    if keys:
        opts |= {"api_key": KEY, "control_plane_api_keys": CP_KEYS}
    gw = launch.gateway([sim], ready=0, processes=2, history_backend="none", **opts)
    user = bearer(USER_KEY)

    def parent_metrics_up() -> bool:  # opened once both processes listen
        try:
            r = at("127.0.0.1", gw, "GET", "/metrics", headers=user, port=gw.metrics_port)
        except OSError:
            return False
        return r.status == 200

    wait_until(parent_metrics_up, 30.0, "the parent's /metrics")
    remote = at(addr, gw, "GET", "/metrics", port=gw.metrics_port)
    if keys:
        assert_openai_error(remote, 401, "invalid_api_key")
        for hdrs in (bearer(KEY), bearer("guess")):
            r = at(addr, gw, "GET", "/metrics", headers=hdrs, port=gw.metrics_port)
            assert_openai_error(r, 401, "invalid_api_key")
        ok = at(addr, gw, "GET", "/metrics", headers=user, port=gw.metrics_port)
    else:
        assert_openai_error(remote, 403, "loopback_only")
        assert (remote.header("X-Request-Id") or "").startswith("req-")  # as one process answers
        relayed = {"X-Forwarded-For": "203.0.113.5"}  # a local proxy's request is not local
        r = at("127.0.0.1", gw, "GET", "/metrics", headers=relayed, port=gw.metrics_port)
        assert_openai_error(r, 403, "loopback_only")
        ok = at("127.0.0.1", gw, "GET", "/metrics", port=gw.metrics_port)
    assert ok.status == 200 and b'process="0"' in ok.body and b'process="1"' in ok.body
