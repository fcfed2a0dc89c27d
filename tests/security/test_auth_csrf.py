"""Finding 7: a cross-origin `text/plain` POST was accepted (CSRF from a browser on the operator's
machine), and the API key was compared with `!=`.

A page on another origin can make the browser send a "simple" request (text/plain, a form, no
Content-Type) to 127.0.0.1 without asking; it can never send `application/json` without a CORS
preflight the gateway does not grant. So JSON endpoints refuse other content types (415), and
keyless requests (trusted for coming from loopback) and control-plane requests refuse foreign
origins (403) unless `--cors-allowed-origins` lists them.
"""

from __future__ import annotations

import ast
import http.client
import re
from pathlib import Path

import pytest
from integration.conftest import Gateway, Launcher, Resp, Sim, assert_openai_error

from smg.core import auth_keys
from smg.core.auth import Gate, RouteClass

from .auth_support import CHAT, KEY, bearer, flat_error

ORIGIN = "http://evil.example"
ALLOWED = "https://ui.example:8443"
CHAT_RAW = b'{"model": "m", "messages": [{"role": "user", "content": "csrf"}], "max_tokens": 2}'


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim("m")


@pytest.fixture(scope="module")
def gw(module_launch: Launcher, sim: Sim) -> Gateway:
    """The developer's default: no keys, loopback."""
    return module_launch.gateway([sim])


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
     "multipart/form-data; boundary=x", None],
)  # fmt: skip
def test_cross_origin_simple_post_is_415(gw: Gateway, sim: Sim, content_type: str | None) -> None:
    """What `fetch(url, {method: "POST", mode: "no-cors", body})` from evil.example sends."""
    hdrs = {"Origin": ORIGIN, "Sec-Fetch-Site": "cross-site"}
    if content_type is not None:
        hdrs["Content-Type"] = content_type
    served = sim.stats()["requests"]
    r = _post(gw, "/v1/chat/completions", CHAT_RAW, hdrs)
    assert_openai_error(r, 415, "unsupported_media_type")
    before = len(gw.workers())
    body = b'{"url": "http://127.0.0.1:9"}'
    flat_error(_post(gw, "/workers", body, hdrs), 415, "UNSUPPORTED_MEDIA_TYPE")
    assert len(gw.workers()) == before  # no worker was registered
    assert sim.stats()["requests"] == served  # nothing reached the worker


def test_json_content_types_pass(gw: Gateway) -> None:
    for ct in ("application/json", "application/json; charset=utf-8", "Application/JSON",
               "application/vnd.smg+json"):  # fmt: skip
        r = _post(gw, "/v1/chat/completions", CHAT_RAW, {"Content-Type": ct})
        assert r.status == 200, (ct, r.body)


def test_foreign_origin_refused_without_a_key(gw: Gateway) -> None:
    json_ct = {"Content-Type": "application/json"}
    for extra in ({"Origin": ORIGIN}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                  {"Origin": f"http://127.0.0.1:{gw.port + 1}"}):  # fmt: skip
        r = _post(gw, "/v1/chat/completions", CHAT_RAW, {**json_ct, **extra})
        assert_openai_error(r, 403, "cross_origin_forbidden")
        flat_error(gw.request("GET", "/workers", headers=extra), 403, "CROSS_ORIGIN_FORBIDDEN")
    same = {"Origin": f"http://127.0.0.1:{gw.port}", "Sec-Fetch-Site": "same-origin"}
    assert _post(gw, "/v1/chat/completions", CHAT_RAW, {**json_ct, **same}).status == 200


def test_allowed_origin_gets_cors(launch: Launcher, sim: Sim) -> None:
    gw = launch.gateway([sim], cors_allowed_origins=[ALLOWED])
    pre = gw.request(
        "OPTIONS",
        "/v1/chat/completions",
        headers={"Origin": ALLOWED, "Access-Control-Request-Method": "POST"},
    )
    assert pre.status == 204
    assert "Authorization" in (pre.header("Access-Control-Allow-Headers") or "")
    assert pre.header("Access-Control-Allow-Origin") == ALLOWED
    r = _post(
        gw,
        "/v1/chat/completions",
        CHAT_RAW,
        {"Origin": ALLOWED, "Content-Type": "application/json"},
    )
    assert r.status == 200 and r.header("Access-Control-Allow-Origin") == ALLOWED
    # a foreign origin's preflight is not granted, and it gets no CORS headers
    denied = gw.request(
        "OPTIONS",
        "/v1/chat/completions",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    )
    assert denied.status == 405 and denied.header("Access-Control-Allow-Origin") is None


def test_keyed_requests_need_no_origin_check(launch: Launcher, sim: Sim) -> None:
    """A bearer key is no ambient credential (a browser never attaches it by itself): a browser
    app holding a key may call the data plane from its own origin."""
    gw = launch.gateway([sim], api_key=KEY)
    hdrs = {**bearer(KEY), "Origin": ORIGIN, "Content-Type": "application/json"}
    assert _post(gw, "/v1/chat/completions", CHAT_RAW, hdrs).status == 200
    text = {**bearer(KEY), "Content-Type": "text/plain"}
    assert_openai_error(
        _post(gw, "/v1/chat/completions", CHAT_RAW, text), 415, "unsupported_media_type"
    )
    assert gw.client().chat.completions.create(**CHAT).choices[0].message.content


def _post(gw: Gateway, path: str, body: bytes, headers: dict[str, str]) -> Resp:
    """Exactly these headers (urllib would add a form Content-Type to a body without one)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        return Resp(r.status, dict(r.getheaders()), r.read())
    finally:
        conn.close()


# --- constant-time comparison ---------------------------------------------------------------------


def test_key_lookup_goes_through_the_hashed_table(monkeypatch: pytest.MonkeyPatch) -> None:
    table = auth_keys.data_plane_table("shared-secret-1", ["team:team-secret-1"])
    assert all(isinstance(k, bytes) and len(k) == 32 for k in table)  # digests, not keys
    assert not any(b"secret" in k for k in table)
    seen: list[str] = []
    real = auth_keys.digest

    def spy(token: str) -> bytes:
        seen.append(token)
        return real(token)

    import smg.core.auth as core

    monkeypatch.setattr(core, "digest", spy)
    gate = Gate(data_keys=table, cp_keys={})
    hdrs = {"Authorization": "Bearer team-secret-1", "Content-Type": "application/json"}
    p = gate.decide(RouteClass.DATA, "POST", hdrs, None)
    assert not isinstance(p, core.JwtCheck) and p.tenant == "tenant:team"
    assert seen == ["team-secret-1"]  # hashed, then one dict lookup of the digest


SECRET = re.compile(r"api_?key|secret|passw|cluster_key|bearer|^token$|^auth$", re.IGNORECASE)


def _secret_operand(node: ast.expr) -> bool:
    """A name (or attribute, slice or method call of one) that holds a secret: `api_key`,
    `self.cluster_key`, `auth[7:].strip()`."""
    if isinstance(node, ast.Subscript):
        return _secret_operand(node.value)
    if isinstance(node, ast.Call):
        return _secret_operand(node.func)
    if isinstance(node, ast.Attribute):
        return bool(SECRET.search(node.attr)) or _secret_operand(node.value)
    return isinstance(node, ast.Name) and bool(SECRET.search(node.id))


def test_no_equality_on_raw_secrets() -> None:
    """No `==`/`!=` between a key, token or secret and another value anywhere in smg/ (compare
    digests through a dict, or hmac.compare_digest). A literal operand (`is None`, a scheme
    name, a count) compares nothing secret."""
    root = Path(__file__).resolve().parents[2] / "smg"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare) or not any(
                isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
            ):
                continue
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) for o in operands):
                continue
            if any(_secret_operand(o) for o in operands):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, offenders
