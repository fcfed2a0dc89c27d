"""OIDC/JWT on the control plane, the IO half: the issuer's signing keys (JWKS) and the check of
a token's signature and claims with pyjwt. The rules (which algorithms, which key, which role)
are pure, in `smg/core/jwt_rules.py`.

Keys come from `--jwt-jwks-uri` (https, http to loopback, or a file) or from the issuer's
discovery document. They are fetched on first use and cached for `ttl_s`; a token naming an
unknown `kid` refetches (key rotation), at most once per `refresh_min_s`, so random kids cannot
make the gateway hammer the IdP. One fetch at a time (a lock; every fetch has a deadline, so the
wait is bounded), no redirects, at most `max_bytes` read. When the IdP is down, the last good
keys stay in use; with none, JWT requests are answered 503 for `refresh_min_s` before the next
try. Client-facing errors never name the key source.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import structlog

from smg.core.auth import AuthError
from smg.core.auth_keys import Principal
from smg.core.jwt_rules import (
    ALGORITHMS,
    LEEWAY_S,
    REQUIRED_CLAIMS,
    JwtSettings,
    file_path,
    is_file_source,
    principal_of,
    remote_url_ok,
    select_key,
)

log = structlog.get_logger("smg.auth")

MAX_KEYS = 100


class JwksError(Exception):
    """The keys could not be had (logged with the source; the client sees a generic 503)."""


def _invalid(reason: str) -> AuthError:
    return AuthError(401, "invalid_token", f"Invalid JWT: {reason}", realm="control-plane")


class JwtVerifier:
    def __init__(
        self,
        settings: JwtSettings,
        now: Callable[[], float],
        *,
        timeout_s: float = 10.0,
        ttl_s: float = 3600.0,
        refresh_min_s: float = 30.0,
        max_bytes: int = 1 << 20,
    ) -> None:
        self.settings = settings
        self.now = now
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.refresh_min_s = refresh_min_s
        self.max_bytes = max_bytes
        self._jwks_uri = settings.jwks_uri
        self._keys: list[Mapping[str, Any]] | None = None
        self._fresh_until = -math.inf
        self._tried_at = -math.inf
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None

    async def verify(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _invalid("malformed token") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            shown = alg if isinstance(alg, str) and alg.isalnum() and len(alg) <= 16 else "?"
            raise _invalid(f"algorithm '{shown}' is not accepted (RS*, PS*, ES* only)")
        if kid is not None and not isinstance(kid, str):
            raise _invalid("malformed kid")
        key = select_key(await self._keys_for(kid), kid, alg)
        if key is None:
            raise _invalid("no signing key of the issuer fits the token's kid and alg")
        s = self.settings
        try:
            claims = jwt.decode(
                token,
                key=jwt.PyJWK(dict(key), algorithm=alg),
                algorithms=[alg],
                audience=s.audience,
                issuer=s.issuer,
                leeway=LEEWAY_S,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except (jwt.PyJWTError, ValueError, TypeError) as exc:  # an unusable JWK too: no 500
            raise _invalid(str(exc)[:200]) from None
        return principal_of(claims, s)

    # --- the keys ---------------------------------------------------------------------------------
    def _usable(self, kid: str | None) -> list[Mapping[str, Any]] | None:
        keys = self._keys
        if keys is None or self.now() >= self._fresh_until:
            return None
        if kid is None or any(k.get("kid") == kid for k in keys):
            return keys
        return None

    async def _keys_for(self, kid: str | None) -> list[Mapping[str, Any]]:
        keys = self._usable(kid)
        if keys is not None:
            return keys
        async with self._lock:
            keys = self._usable(kid)  # another request may have fetched while we waited
            if keys is not None:
                return keys
            now = self.now()
            if now - self._tried_at < self.refresh_min_s:
                if self._keys is None:
                    raise _unavailable()
                return self._keys  # an unknown kid, and we asked the issuer moments ago
            self._tried_at = now
            try:
                fetched = await self._fetch()
            except JwksError as exc:
                log.warning("jwks_fetch_failed", error=str(exc), cached=self._keys is not None)
                if self._keys is None:
                    raise _unavailable() from None
                return self._keys
            self._keys, self._fresh_until = fetched, now + self.ttl_s
            log.info("jwks_loaded", keys=len(fetched))
            return fetched

    async def _fetch(self) -> list[Mapping[str, Any]]:
        if self._jwks_uri is None:
            doc = await self._get_json(self.settings.discovery_url)
            uri = doc.get("jwks_uri")
            if not isinstance(uri, str) or not remote_url_ok(uri):
                raise JwksError("the discovery document names no https jwks_uri")
            self._jwks_uri = uri
        doc = await self._get_json(self._jwks_uri)
        keys = doc.get("keys")
        if not isinstance(keys, list) or not all(isinstance(k, dict) for k in keys):
            raise JwksError(f"{self._jwks_uri}: no 'keys' list of objects")
        return keys[:MAX_KEYS]

    async def _get_json(self, uri: str) -> dict[str, Any]:
        raw = await (self._read_file(uri) if is_file_source(uri) else self._download(uri))
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise JwksError(f"{uri}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise JwksError(f"{uri}: not a JSON object")
        return doc

    async def _read_file(self, uri: str) -> bytes:
        path = Path(file_path(uri))

        def read() -> bytes:
            with path.open("rb") as f:
                data = f.read(self.max_bytes + 1)
            if len(data) > self.max_bytes:
                raise JwksError(f"{path}: larger than {self.max_bytes} bytes")
            return data

        try:
            return await asyncio.to_thread(read)
        except OSError as exc:
            raise JwksError(f"{path}: {exc}") from None

    async def _download(self, url: str) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=4),
            )
        try:
            async with self._session.get(url, allow_redirects=False) as resp:
                if resp.status != 200:
                    raise JwksError(f"{url}: HTTP {resp.status}")
                data = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise JwksError(f"{url}: larger than {self.max_bytes} bytes")
                return bytes(data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise JwksError(f"{url}: {type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _unavailable() -> AuthError:
    return AuthError(
        503, "jwks_unavailable", "The JWT signing keys are unavailable", realm="control-plane"
    )
