"""Helpers of the auth suite: a non-loopback address of this machine, gateways that need a
control-plane credential to be watched, and keys and tokens for the JWT tests.

A "remote" peer on one machine: the gateway binds 0.0.0.0 and the test connects to one of the
machine's own non-loopback addresses, so the gateway sees that address (not 127.0.0.1) as the
peer. The address comes from the routing table (a UDP "connect" sends nothing) or the
interfaces; a machine with none gets a dummy interface holding a TEST-NET address (root).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from integration.conftest import Gateway, Launcher, Resp, http, wait_until

KEY = "data-plane-key-0123456789"
ADMIN_KEY = "admin-key-0123456789abcdef"
USER_KEY = "viewer-key-0123456789abcdef"
CP_KEYS = [[f"ops1:Ops team:admin:{ADMIN_KEY}"], [f"viewer:Read only:user:{USER_KEY}"]]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
_DUMMY_IF, _DUMMY_ADDR = "smgauth0", "198.18.0.1"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _usable(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    return not ip.is_loopback and not ip.is_unspecified and not ip.is_link_local


def _from_route() -> str | None:
    for target in ("192.0.2.254", "203.0.113.1", "10.255.255.254"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((target, 9))  # UDP: picks a source address, sends nothing
            except OSError:
                continue
            addr = s.getsockname()[0]
            if _usable(addr):
                return str(addr)
    return None


def _from_interfaces() -> str | None:
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            addr = parts[parts.index("inet") + 1].split("/")[0]
            if _usable(addr):
                return addr
    return None


@contextlib.contextmanager
def remote_address() -> Iterator[str]:
    """One of this machine's non-loopback IPv4 addresses (made, as root, if it has none)."""
    found = _from_route() or _from_interfaces()
    if found is not None:
        yield found
        return
    run = ["ip", "link", "add", _DUMMY_IF, "type", "dummy"]
    subprocess.run(run, check=True, capture_output=True, timeout=10)
    try:
        for cmd in (
            ["ip", "addr", "add", f"{_DUMMY_ADDR}/32", "dev", _DUMMY_IF],
            ["ip", "link", "set", _DUMMY_IF, "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True, timeout=10)
        yield _DUMMY_ADDR
    finally:
        subprocess.run(["ip", "link", "del", _DUMMY_IF], capture_output=True, timeout=10)


def at(
    addr: str,
    gw: Gateway,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    port: int | None = None,
) -> Resp:
    """A request to the gateway (or its metrics port) at `addr`, from that address."""
    host = f"[{addr}]" if ":" in addr else addr
    url = f"http://{host}:{port or gw.port}{path}"
    return http(method, url, body, headers=headers)


def watched_gateway(
    launch: Launcher, workers: list[Any], admin: dict[str, str], **options: Any
) -> Gateway:
    """A gateway whose control plane needs `admin` headers: started without the launcher's
    readiness probe (it asks /workers with the data-plane key), then watched with them."""
    gw = launch.gateway(workers, ready=0, **options)

    def ready() -> bool:
        r = http("GET", gw.url + "/workers", headers=admin)
        assert r.status == 200, r
        listed = r.json()["workers"]
        return len(listed) >= len(workers) and all(w["status"] == "ready" for w in listed)

    wait_until(ready, 20.0, "workers ready")
    return gw


def flat_error(resp: Resp, status: int, code: str) -> dict[str, Any]:
    """The /workers error shape: `{"error": "...", "code": "CODE"}`."""
    assert resp.status == status, (resp.status, resp.body[:300])
    body = resp.json()
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code, body
    return body


def openai_code(resp: Resp) -> str | None:
    try:
        return resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


# --- JWT ------------------------------------------------------------------------------------------


class Signer:
    """A signing key with its public JWK; mints tokens for an issuer and audience."""

    def __init__(self, kind: str = "RS256", kid: str = "k1") -> None:
        self.alg, self.kid = kind, kid
        if kind.startswith("RS"):
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            public_jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key())
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            public_jwk = jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key())
        self.jwk = {**json.loads(public_jwk), "kid": kid, "use": "sig", "alg": kind}

    def token(
        self, iss: str, aud: str, *, ttl_s: float = 300.0, headers: dict | None = None, **claims
    ) -> str:
        now = int(time.time())
        payload = {"iss": iss, "aud": aud, "sub": "alice", "iat": now, "exp": now + int(ttl_s)}
        payload.update(claims)
        hdrs = {"kid": self.kid, **(headers or {})}
        return jwt.encode(payload, self.private, algorithm=self.alg, headers=hdrs)


def jwks(*signers: Signer) -> dict[str, Any]:
    return {"keys": [s.jwk for s in signers]}
