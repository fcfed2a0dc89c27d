"""Credentials as data: who a caller is (`Principal`), the key tables, and their CLI syntax.

Keys are never kept or compared as text. Each configured key is hashed once (SHA-256) into a
dict `digest -> Principal`; a presented token is hashed and looked up, as the Rust gateway's
data-plane middleware does. The lookup compares 32-byte digests, not the secret: a guess that is
"close" to a key has an unrelated digest, so timing reveals nothing about the key's bytes (and
`dict` equality on bytes is `memcmp` on a value the caller cannot steer towards the key).

Tenant identities (the rate limiter's caller key, `Principal.tenant`):
    tenant key        tenant:<tenant id>
    shared --api-key  key:<first 16 hex digits of the key's SHA-256>
    trusted header    header:<value>            (only with --trust-tenant-header)
    loopback, keyless loopback
    remote, keyless   ip:<address>              (only with --allow-unauthenticated)
    control plane     cp:<key id> / jwt:<subject>
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from smg.config import ConfigError

MAX_TENANT_ID = 128


class Role(IntEnum):
    """Control-plane roles, ordered: a higher role may do what a lower one may."""

    USER = 1
    ADMIN = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Role | None:
        return {"admin": cls.ADMIN, "user": cls.USER}.get(text.strip().lower())


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated (or trusted) caller. `auth_method`: api_key, tenant_api_key,
    control_plane_key, jwt, loopback, anonymous, tenant_header. `role` is set on the control
    plane only."""

    id: str
    auth_method: str
    tenant: str
    role: Role | None = None
    name: str = ""


LOOPBACK = Principal("loopback", "loopback", "loopback", Role.ADMIN)


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def bearer(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("Authorization")
    if auth is None or auth[:7].lower() != "bearer ":
        return None
    return auth[7:].strip() or None


def data_plane_key(headers: Mapping[str, str]) -> str | None:
    """A data-plane key: `Authorization: Bearer <key>`, else `x-api-key: <key>` (how Anthropic's
    SDKs send it; the same keys, data plane only). `bearer` written out (a call a request)."""
    auth = headers.get("Authorization")
    token = auth[7:].strip() if auth is not None and auth[:7].lower() == "bearer " else ""
    return token or (headers.get("x-api-key") or "").strip() or None


def valid_tenant_id(text: str) -> bool:
    """1-128 visible ASCII characters: safe in logs, metrics and replicated rate-limit keys."""
    return (
        0 < len(text) <= MAX_TENANT_ID and text.isascii() and text.isprintable() and " " not in text
    )


def _check_key(key: str, what: str) -> None:
    if not key:
        raise ConfigError(f"{what}: the key is empty")
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ConfigError(f"{what}: a key must be visible ASCII without spaces")


def shared_key_principal(key: str) -> Principal:
    return Principal("api-key", "api_key", "key:" + digest(key).hex()[:16])


def data_plane_table(api_key: str | None, tenant_keys: Iterable[str]) -> dict[bytes, Principal]:
    """`--api-key` and `--tenant-api-key TENANT:KEY` entries -> digest -> Principal. A bad entry
    raises ConfigError naming the tenant, never the key."""
    table: dict[bytes, Principal] = {}
    if api_key is not None:
        _check_key(api_key, "--api-key")
        table[digest(api_key)] = shared_key_principal(api_key)
    for entry in tenant_keys:
        tenant, sep, key = entry.partition(":")
        tenant = tenant.strip()
        if not sep:
            raise ConfigError("--tenant-api-key: expected TENANT:KEY (no ':' in one entry)")
        if not valid_tenant_id(tenant):
            raise ConfigError(
                f"--tenant-api-key: tenant id must be 1-{MAX_TENANT_ID} visible ASCII characters"
            )
        _check_key(key, f"--tenant-api-key {tenant}")
        d = digest(key)
        if d in table:
            raise ConfigError(f"--tenant-api-key {tenant}: this key is already configured")
        table[d] = Principal(tenant, "tenant_api_key", "tenant:" + tenant)
    return table


def control_plane_table(entries: Iterable[str]) -> dict[bytes, Principal]:
    """`--control-plane-api-keys ID:NAME:ROLE:KEY` entries -> digest -> Principal."""
    table: dict[bytes, Principal] = {}
    ids: set[str] = set()
    for entry in entries:
        parts = entry.split(":", 3)
        if len(parts) != 4:
            raise ConfigError("--control-plane-api-keys: expected ID:NAME:ROLE:KEY")
        key_id, name, role_text, key = parts
        if not valid_tenant_id(key_id):
            raise ConfigError(
                f"--control-plane-api-keys: the id must be 1-{MAX_TENANT_ID} visible ASCII "
                "characters"
            )
        role = Role.parse(role_text)
        if role is None:
            raise ConfigError(f"--control-plane-api-keys {key_id}: ROLE must be admin or user")
        _check_key(key, f"--control-plane-api-keys {key_id}")
        if key_id in ids:
            raise ConfigError(f"--control-plane-api-keys: id {key_id!r} is configured twice")
        d = digest(key)
        if d in table:
            raise ConfigError(f"--control-plane-api-keys {key_id}: this key is already configured")
        ids.add(key_id)
        table[d] = Principal(key_id, "control_plane_key", "cp:" + key_id, role, name)
    return table


def role_mapping(entries: Iterable[str]) -> dict[str, Role]:
    """`--jwt-role-mapping IDP_ROLE=admin|user` entries (the last `=` splits)."""
    mapping: dict[str, Role] = {}
    for entry in entries:
        idp, sep, gw = entry.rpartition("=")
        role = Role.parse(gw)
        if not sep or not idp or role is None:
            raise ConfigError(f"--jwt-role-mapping {entry!r}: expected IDP_ROLE=admin|user")
        mapping[idp] = role
    return mapping
