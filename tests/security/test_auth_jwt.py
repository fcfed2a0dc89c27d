"""OIDC/JWT on the control plane: a token with the right role reaches /workers; forged, expired,
misaddressed and downgraded (`none`, HS256-with-the-public-key) tokens do not.

The identity provider is a small aiohttp server in this process, over https with a throwaway CA
(trustme) that the gateway trusts through SSL_CERT_FILE; the gateway finds its keys through OIDC
discovery (no --jwt-jwks-uri). A second gateway reads its keys from a file.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from integration.conftest import Gateway, Launcher, Sim, assert_openai_error, http

from .auth_support import CHAT, KEY, Signer, bearer, flat_error, jwks, watched_gateway

AUD = "smg-gateway"


@dataclass
class Idp:
    issuer: str
    keys: list[Signer]
    fetches: dict[str, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Idp]:
    """An OIDC provider on https://localhost:<port>, run by a loop in a thread."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ssl_ctx)
    state = Idp("", [Signer("RS256", "rsa-1"), Signer("ES256", "ec-1")])
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner_box: list[web.AppRunner] = []

    async def discovery(_: web.Request) -> web.Response:
        state.fetches["discovery"] = state.fetches.get("discovery", 0) + 1
        return web.json_response({"issuer": state.issuer, "jwks_uri": state.issuer + "/jwks"})

    async def keys(_: web.Request) -> web.Response:
        state.fetches["jwks"] = state.fetches.get("jwks", 0) + 1
        return web.json_response(jwks(*state.keys))

    async def start() -> None:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", discovery)
        app.router.add_get("/jwks", keys)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        state.issuer = f"https://localhost:{port}"
        runner_box.append(runner)
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert ready.wait(10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSL_CERT_FILE", str(ca_file))  # the gateway processes trust the test CA
        yield state
    asyncio.run_coroutine_threadsafe(runner_box[0].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture(scope="module")
def sim(module_launch: Launcher) -> Sim:
    return module_launch.sim("m")


@pytest.fixture(scope="module")
def gw(module_launch: Launcher, sim: Sim, idp: Idp) -> Gateway:
    admin = idp.keys[0].token(idp.issuer, AUD, roles=["admin"])
    return watched_gateway(
        module_launch,
        [sim],
        bearer(admin),
        api_key=KEY,
        jwt_issuer=idp.issuer,
        jwt_audience=AUD,
    )


def _workers(gw: Gateway, token: str) -> Any:
    return http("GET", gw.url + "/workers", headers=bearer(token))


@pytest.mark.parametrize("signer", [0, 1], ids=["RS256", "ES256"])
def test_admin_role_reaches_admin(gw: Gateway, idp: Idp, signer: int) -> None:
    s = idp.keys[signer]
    r = _workers(gw, s.token(idp.issuer, AUD, roles=["admin"]))
    assert r.status == 200 and r.json()["total"] == 1
    # a string claim works as well as a list
    assert _workers(gw, s.token(idp.issuer, AUD, roles="admin")).status == 200
    assert idp.fetches.get("discovery") == 1  # found through discovery, then cached


def test_user_role_is_forbidden(gw: Gateway, idp: Idp) -> None:
    s = idp.keys[0]
    for claims in ({"roles": ["user"]}, {}, {"roles": ["Admin.Wannabe"]}):
        r = flat_error(_workers(gw, s.token(idp.issuer, AUD, **claims)), 403, "ADMIN_ROLE_REQUIRED")
        assert r["error"] == "Admin role required for control plane access"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hs256_with_public_key(s: Signer, payload: dict[str, Any]) -> str:
    """The alg-confusion attack: HS256 keyed with the RSA public key the JWKS publishes."""
    pem = s.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": s.kid}).encode())
    body = _b64(json.dumps(payload).encode())
    sig = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


def test_bad_tokens_are_refused(gw: Gateway, idp: Idp) -> None:
    rsa_key, now = idp.keys[0], int(time.time())
    stranger = Signer("RS256", rsa_key.kid)  # same kid, another key
    good = {"iss": idp.issuer, "aud": AUD, "sub": "mallory", "exp": now + 300, "roles": ["admin"]}
    cases = {
        "wrong audience": rsa_key.token(idp.issuer, "someone-else", roles=["admin"]),
        "wrong issuer": rsa_key.token("https://evil.example", AUD, roles=["admin"]),
        "expired": rsa_key.token(idp.issuer, AUD, ttl_s=-120, roles=["admin"]),
        "not yet valid": rsa_key.token(idp.issuer, AUD, nbf=now + 600, roles=["admin"]),
        "no exp": jwt.encode(
            {k: v for k, v in good.items() if k != "exp"},
            rsa_key.private,
            algorithm="RS256",
            headers={"kid": rsa_key.kid},
        ),
        "alg none": jwt.encode(good, None, algorithm="none"),
        "alg none with kid": jwt.encode(good, None, algorithm="none", headers={"kid": rsa_key.kid}),
        "HS256 keyed with the public key": _hs256_with_public_key(rsa_key, good),
        "signed by another key": stranger.token(idp.issuer, AUD, roles=["admin"]),
        "unknown kid": Signer("ES256", "nobody").token(idp.issuer, AUD, roles=["admin"]),
        "RS256 token naming the EC key": rsa_key.token(
            idp.issuer, AUD, roles=["admin"], headers={"kid": idp.keys[1].kid}
        ),
        "garbage": "a.b.c",
    }
    for what, token in cases.items():
        r = _workers(gw, token)
        assert r.status == 401, (what, r.status, r.body)
        assert r.json()["code"] == "INVALID_TOKEN", (what, r.body)
        assert r.header("WWW-Authenticate") == 'Bearer realm="control-plane"'
    # a tampered payload breaks the signature
    head, _, sig = rsa_key.token(idp.issuer, AUD, roles=["user"]).split(".")
    forged = f"{head}.{_b64(json.dumps(good).encode())}.{sig}"
    assert _workers(gw, forged).json()["code"] == "INVALID_TOKEN"


def test_jwt_does_not_open_the_data_plane(gw: Gateway, idp: Idp) -> None:
    token = idp.keys[0].token(idp.issuer, AUD, roles=["admin"])
    r = http("POST", gw.url + "/v1/chat/completions", CHAT, headers=bearer(token))
    assert_openai_error(r, 401, "invalid_api_key")


def test_role_mapping_and_jwks_file(launch: Launcher, sim: Sim, tmp_path: Path) -> None:
    """--jwt-jwks-uri as a file, a nested role claim and an IdP role name mapped to admin."""
    s = Signer("ES256", "file-key")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(s)))
    iss = "https://idp.example/realms/smg"
    admin = s.token(iss, AUD, realm_access={"roles": ["offline", "Gateway.Admin"]})
    gw = watched_gateway(
        launch,
        [sim],
        bearer(admin),
        jwt_issuer=iss,
        jwt_audience=AUD,
        jwt_jwks_uri=f"file://{path}",
        jwt_role_claim="realm_access.roles",
        jwt_role_mapping=[["Gateway.Admin=admin"], ["Gateway.Viewer=user"]],
    )
    viewer = s.token(iss, AUD, realm_access={"roles": ["Gateway.Viewer"]})
    flat_error(_workers(gw, viewer), 403, "ADMIN_ROLE_REQUIRED")
    # with a mapping, the literal value "admin" no longer counts
    literal = s.token(iss, AUD, realm_access={"roles": ["admin"]})
    flat_error(_workers(gw, literal), 403, "ADMIN_ROLE_REQUIRED")
    # a viewer reads /metrics (any role), nobody without a token does
    m = http("GET", f"http://127.0.0.1:{gw.metrics_port}/metrics", headers=bearer(viewer))
    assert m.status == 200
    nobody = http("GET", f"http://127.0.0.1:{gw.metrics_port}/metrics")
    assert_openai_error(nobody, 401, "invalid_api_key")
