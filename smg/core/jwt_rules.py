"""OIDC/JWT on the control plane, the pure half: settings, which signing key a token may use, and
who the verified claims say the caller is. Fetching the keys and checking the signature live in
`smg/api/jwks.py` (pyjwt).

Only asymmetric algorithms are accepted (RS*, PS*, ES*): a token saying `none` or `HS256` is
refused before any key is looked at, so a public key can never be used as an HMAC secret. A key
is used only for the algorithm family it was made for (RSA for RS/PS, the matching curve for ES)
and, when the JWK names its `alg`, for exactly that one.

Roles come from `--jwt-role-claim` (a string or a list; `realm_access.roles` reads nested claims
when no claim has that literal name). With `--jwt-role-mapping` only mapped values count; without,
the values `admin` and `user` do. The highest role found wins; none found means `user`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from smg.config import AuthConfig, ConfigError
from smg.core.auth_keys import Principal, Role

ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
)
_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
LEEWAY_S = 30.0  # clock skew tolerated on exp/nbf, as the Rust gateway
REQUIRED_CLAIMS = ("exp", "iss", "aud")
MAX_SUBJECT = 256


@dataclass(frozen=True, slots=True)
class JwtSettings:
    issuer: str
    audience: str
    jwks_uri: str | None  # None: discovered from the issuer
    role_claim: str = "roles"
    role_mapping: Mapping[str, Role] = field(default_factory=dict)

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def remote_url_ok(url: str) -> bool:
    """https anywhere; plain http only to a loopback host (tests, a local IdP)."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return bool(parts.hostname)
    return parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1", "::1")


def is_file_source(uri: str) -> bool:
    return uri.startswith("file://") or "://" not in uri


def file_path(uri: str) -> str:
    return urlsplit(uri).path if uri.startswith("file://") else uri


def jwt_settings(a: AuthConfig, mapping: Mapping[str, Role]) -> JwtSettings | None:
    if a.jwt_issuer is None and a.jwt_audience is None:
        if a.jwt_jwks_uri is not None or mapping:
            raise ConfigError(
                "--jwt-jwks-uri/--jwt-role-mapping need --jwt-issuer and --jwt-audience"
            )
        return None
    if not a.jwt_issuer or not a.jwt_audience:
        raise ConfigError("JWT auth needs both --jwt-issuer and --jwt-audience")
    uri = a.jwt_jwks_uri
    if uri is not None and not is_file_source(uri) and not remote_url_ok(uri):
        raise ConfigError(
            "--jwt-jwks-uri must be an https:// URL (http:// only to loopback), a file path or "
            "a file:// URL"
        )
    if uri is None and not remote_url_ok(a.jwt_issuer):
        raise ConfigError(
            "--jwt-issuer must be an https:// URL to discover its keys; or set --jwt-jwks-uri"
        )
    if not a.jwt_role_claim.strip():
        raise ConfigError("--jwt-role-claim must not be empty")
    return JwtSettings(a.jwt_issuer, a.jwt_audience, uri, a.jwt_role_claim.strip(), dict(mapping))


def key_fits(jwk: Mapping[str, Any], alg: str) -> bool:
    """May this JWK verify a token signed with `alg`?"""
    if alg not in ALGORITHMS or jwk.get("use", "sig") != "sig":
        return False
    named = jwk.get("alg")
    if named is not None and named != alg:
        return False
    kty = jwk.get("kty")
    if alg.startswith(("RS", "PS")):
        return bool(kty == "RSA")
    return kty == "EC" and jwk.get("crv") == _EC_CURVES[alg]


def select_key(
    keys: list[Mapping[str, Any]], kid: str | None, alg: str
) -> Mapping[str, Any] | None:
    """The key named by `kid`; with no kid, the only key that fits (else none)."""
    if kid is not None:
        for k in keys:
            if k.get("kid") == kid:
                return k if key_fits(k, alg) else None
        return None
    fitting = [k for k in keys if key_fits(k, alg)]
    return fitting[0] if len(fitting) == 1 else None


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    if name in claims:
        return claims[name]
    node: Any = claims
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def role_of(claims: Mapping[str, Any], settings: JwtSettings) -> Role:
    raw = _claim(claims, settings.role_claim)
    values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    best = Role.USER
    for v in values:
        if not isinstance(v, str):
            continue
        role = settings.role_mapping.get(v) if settings.role_mapping else Role.parse(v)
        if role is not None and role > best:
            best = role
    return best


def principal_of(claims: Mapping[str, Any], settings: JwtSettings) -> Principal:
    subject = next(
        (
            v
            for k in ("sub", "email", "preferred_username")
            if isinstance(v := claims.get(k), str) and v
        ),
        "unknown",
    )[:MAX_SUBJECT]
    name = claims.get("name")
    return Principal(
        subject,
        "jwt",
        "jwt:" + subject,
        role_of(claims, settings),
        name if isinstance(name, str) else "",
    )
