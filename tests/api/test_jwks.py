"""Control-plane JWTs: the pure rules (smg/core/jwt_rules.py) as tables, and the verifier
(smg/api/jwks.py) over a JWKS file with an injected clock: caching, key rotation, refetch
limits, an IdP that goes away."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from smg import errors
from smg.api.jwks import JwtVerifier
from smg.core.auth_keys import Principal, Role
from smg.core.jwt_rules import JwtSettings, key_fits, principal_of, role_of, select_key

RSA = {"kty": "RSA", "kid": "r", "n": "x", "e": "AQAB"}
EC256 = {"kty": "EC", "kid": "e", "crv": "P-256", "x": "x", "y": "y"}
EC384 = {"kty": "EC", "kid": "e3", "crv": "P-384", "x": "x", "y": "y"}
OCT = {"kty": "oct", "kid": "h", "k": "c2VjcmV0"}


@pytest.mark.parametrize(
    ("jwk", "alg", "fits"),
    [
        (RSA, "RS256", True), (RSA, "PS512", True), (RSA, "ES256", False), (RSA, "HS256", False),
        (RSA, "none", False), ({**RSA, "alg": "RS384"}, "RS256", False),
        ({**RSA, "alg": "RS384"}, "RS384", True), ({**RSA, "use": "enc"}, "RS256", False),
        (EC256, "ES256", True), (EC256, "ES384", False), (EC384, "ES384", True),
        (EC256, "RS256", False), (OCT, "HS256", False), (OCT, "RS256", False),
        ({"kty": "OKP", "crv": "Ed25519"}, "EdDSA", False),
    ],
)  # fmt: skip
def test_key_fits(jwk: dict[str, Any], alg: str, fits: bool) -> None:
    assert key_fits(jwk, alg) is fits


def test_select_key() -> None:
    keys = [RSA, EC256, OCT]
    assert select_key(keys, "r", "RS256") is RSA
    assert select_key(keys, "r", "ES256") is None  # the kid's key, never another that fits
    assert select_key(keys, "nope", "RS256") is None
    assert select_key(keys, None, "ES256") is EC256  # no kid: the only fitting key
    assert select_key([RSA, {**RSA, "kid": "r2"}], None, "RS256") is None  # ambiguous


SETTINGS = JwtSettings("https://idp", "aud", None, "roles", {})
MAPPED = JwtSettings(
    "https://idp", "aud", None, "groups", {"G.Admin": Role.ADMIN, "G.User": Role.USER}
)


@pytest.mark.parametrize(
    ("settings", "claims", "role"),
    [
        (SETTINGS, {"roles": "admin"}, Role.ADMIN),
        (SETTINGS, {"roles": ["user", "admin"]}, Role.ADMIN),
        (SETTINGS, {"roles": ["ADMIN"]}, Role.ADMIN), (SETTINGS, {"roles": ["user"]}, Role.USER),
        (SETTINGS, {}, Role.USER), (SETTINGS, {"roles": 1}, Role.USER),
        (SETTINGS, {"roles": [1, None, "admin"]}, Role.ADMIN),
        (SETTINGS, {"role": "admin"}, Role.USER),
        (MAPPED, {"groups": ["G.Admin"]}, Role.ADMIN), (MAPPED, {"groups": ["admin"]}, Role.USER),
        (MAPPED, {"groups": ["x", "G.User"]}, Role.USER),
        (JwtSettings("i", "a", None, "realm_access.roles"), {"realm_access": {"roles": ["admin"]}},
         Role.ADMIN),
        (JwtSettings("i", "a", None, "https://ex.com/roles"), {"https://ex.com/roles": "admin"},
         Role.ADMIN),
    ],
)  # fmt: skip
def test_role_of(settings: JwtSettings, claims: dict[str, Any], role: Role) -> None:
    assert role_of(claims, settings) is role


def test_principal_of() -> None:
    p = principal_of({"sub": "u1", "name": "Ann", "roles": ["admin"]}, SETTINGS)
    assert p == Principal("u1", "jwt", "jwt:u1", Role.ADMIN, "Ann")
    assert principal_of({"email": "a@b"}, SETTINGS).id == "a@b"
    assert principal_of({"sub": ""}, SETTINGS).id == "unknown"
    assert len(principal_of({"sub": "x" * 1000}, SETTINGS).id) == 256


# --- the verifier ---------------------------------------------------------------------------------

ISS, AUD = "https://idp.example", "gw"


class Key:
    def __init__(self, kid: str, alg: str = "ES256") -> None:
        self.kid, self.alg = kid, alg
        if alg == "ES256":
            self.private: Any = ec.generate_private_key(ec.SECP256R1())
            pub = jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key())
        else:
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pub = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key())
        self.jwk = {**json.loads(pub), "kid": kid}

    def token(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISS, "aud": AUD, "sub": "s", "exp": now + 60, "roles": ["admin"], **claims}
        return jwt.encode(body, self.private, algorithm=self.alg, headers={"kid": self.kid})


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return tmp_path / "jwks.json"


def publish(path: Path, *keys: Key, **extra: Any) -> None:
    put(path, json.dumps({"keys": [k.jwk for k in keys], **extra}))


def put(path: Path, text: str) -> None:
    path.write_text(text)


def verifier(path: Path, clock: Clock, **kw: Any) -> tuple[JwtVerifier, list[str]]:
    v = JwtVerifier(JwtSettings(ISS, AUD, str(path)), clock, **kw)
    reads: list[str] = []
    real = v._read_file

    async def counted(uri: str) -> bytes:
        reads.append(uri)
        return await real(uri)

    v._read_file = counted  # type: ignore[method-assign]
    return v, reads


async def refused(v: JwtVerifier, token: str) -> tuple[int, str]:
    with pytest.raises(errors.ApiError) as info:
        await v.verify(token)
    return info.value.status, info.value.code


async def test_verify_caches_and_expires(source: Path) -> None:
    k1, clock = Key("k1"), Clock()
    publish(source, k1)
    v, reads = verifier(source, clock, ttl_s=100.0)
    assert (await v.verify(k1.token())).role is Role.ADMIN
    assert (await v.verify(k1.token(roles=["user"]))).role is Role.USER
    assert len(reads) == 1
    clock.t += 101  # past the TTL: fetched again
    await v.verify(k1.token())
    assert len(reads) == 2


async def test_rotation_refetches_at_most_once_per_interval(source: Path) -> None:
    k1, k2, clock = Key("k1"), Key("k2", "RS256"), Clock()
    publish(source, k1)
    v, reads = verifier(source, clock, refresh_min_s=30.0)
    await v.verify(k1.token())
    publish(source, k1, k2)  # the IdP rotates
    assert await refused(v, k2.token()) == (401, "invalid_token")  # asked moments ago: no fetch
    for i in range(20):  # random kids cannot make us hammer the IdP
        assert await refused(v, Key(f"x{i}").token()) == (401, "invalid_token")
    assert len(reads) == 1
    clock.t += 31
    assert (await v.verify(k2.token())).id == "s"  # the unknown kid triggers one refetch
    assert len(reads) == 2


async def test_idp_outage(source: Path) -> None:
    k1, clock = Key("k1"), Clock()
    v, reads = verifier(source, clock, ttl_s=100.0, refresh_min_s=30.0)
    assert await refused(v, k1.token()) == (503, "jwks_unavailable")  # no file yet
    publish(source, k1)
    assert await refused(v, k1.token()) == (503, "jwks_unavailable")  # not retried at once
    assert len(reads) == 1
    clock.t += 31
    await v.verify(k1.token())
    put(source, "{not json")
    clock.t += 101  # expired, and the source is broken: the last good keys still serve
    await v.verify(k1.token())
    assert len(reads) == 3


async def test_oversized_or_malformed_jwks(source: Path) -> None:
    k1, clock = Key("k1"), Clock()
    publish(source, k1, pad="x" * 5000)
    v, _ = verifier(source, clock, max_bytes=4096)
    assert await refused(v, k1.token()) == (503, "jwks_unavailable")
    put(source, json.dumps({"keys": "nope"}))
    v2, _ = verifier(source, clock)
    assert await refused(v2, k1.token()) == (503, "jwks_unavailable")
