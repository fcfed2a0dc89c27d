"""The audit log: one `control_plane_audit` line per control-plane request, allowed or denied,
with who, how, what and the outcome, never a key; none with `--disable-audit-logging`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from integration.conftest import Gateway, Launcher, Sim, http, wait_until

from .auth_support import ADMIN_KEY, CHAT, CP_KEYS, KEY, USER_KEY, bearer, watched_gateway


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim("m")


def audit_lines(gw: Gateway) -> list[dict[str, Any]]:
    out = []
    for line in gw.proc.log_path.read_text().splitlines():
        if line.startswith("{") and '"control_plane_audit"' in line:
            out.append(json.loads(line))
    return out


def _by_request_id(gw: Gateway, rid: str) -> dict[str, Any]:
    return wait_until(
        lambda: next((a for a in audit_lines(gw) if a["request_id"] == rid), None),
        5.0,
        f"the audit line of {rid}",
    )


def test_admin_actions_are_audited_without_secrets(launch: Launcher, sim: Sim) -> None:
    # --log-level warn: the audit trail does not depend on the log level
    gw = watched_gateway(
        launch,
        [sim],
        bearer(ADMIN_KEY),
        api_key=KEY,
        control_plane_api_keys=CP_KEYS,
        log_json=True,
        log_level="warn",
    )
    spare = launch.sim("m")
    calls = [
        ("POST", "/workers", {"url": spare.url}, bearer(ADMIN_KEY), 202),
        ("GET", "/workers", None, bearer(USER_KEY), 403),
        ("GET", "/get_loads", None, bearer(KEY), 401),
        ("DELETE", "/workers/x%0Afake_line=1", None, {}, 401),
    ]
    for i, (method, path, body, hdrs, status) in enumerate(calls):
        rid = f"audit-{i}"
        r = http(method, gw.url + path, body, headers={**hdrs, "X-Request-Id": rid})
        assert r.status == status, (path, r.body)
    added = _by_request_id(gw, "audit-0")
    assert added == {
        **added,
        "principal": "ops1",
        "auth_method": "control_plane_key",
        "role": "admin",
        "method": "POST",
        "path": "/workers",
        "outcome": "allowed",
        "status": 202,
    }
    viewer = _by_request_id(gw, "audit-1")
    assert (viewer["principal"], viewer["role"], viewer["outcome"], viewer["status"]) == (
        "viewer",
        "user",
        "denied",
        403,
    )
    data_key = _by_request_id(gw, "audit-2")
    assert (data_key["principal"], data_key["outcome"], data_key["status"]) == (
        "unauthenticated",
        "denied",
        401,
    )
    injected = _by_request_id(gw, "audit-3")
    assert injected["path"] == "/workers/x\\nfake_line=1"  # escaped: one line, no forged entry
    # the data plane is not audited, and no key or its hash ever reaches the log
    assert gw.request("POST", "/v1/chat/completions", CHAT).status == 200
    log = gw.proc.log_path.read_text()
    for secret in (KEY, ADMIN_KEY, USER_KEY):
        assert secret not in log
    assert not any(a["path"].startswith("/v1/") for a in audit_lines(gw))


def test_disable_audit_logging(launch: Launcher, sim: Sim) -> None:
    gw = launch.gateway([sim], log_json=True, disable_audit_logging=True)
    assert gw.request("GET", "/workers").status == 200
    assert gw.request("GET", "/get_loads").status == 200
    r = gw.request("POST", "/workers", {"url": "http://127.0.0.1:9"}, headers={"Origin": "x"})
    assert r.status == 403
    assert audit_lines(gw) == []
