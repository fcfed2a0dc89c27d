"""The gate's aiohttp shell: route class of a request, the pure decision, JWT verification, CORS,
and the warnings an exposed gateway owes its operator. The rules are in `smg/core/auth.py`.

Requests the router cannot match (404/405) skip the gate and get their 404/405 (as in the Rust
gateway, whose auth layers sit on matched routes only). A matched route is classified once by its
canonical path (`/workers/{worker_id}`), so what is checked is what will run, whatever the path's
spelling.

CORS (`--cors-allowed-origins`): a listed origin gets `Access-Control-Allow-Origin` on every
answer (streams included: set when headers are prepared) and its preflights (`OPTIONS`) are
answered 204. Other origins get no CORS headers, so a browser never lets their pages read an
answer, and the gate refuses their requests where no key is sent and on the control plane.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from smg.config import GatewayConfig
from smg.core.auth import Gate, JwtCheck, RouteClass, classify
from smg.core.auth_keys import Principal

if TYPE_CHECKING:
    from smg.api.jwks import JwtVerifier

log = structlog.get_logger("smg.auth")

ANONYMOUS_WARNING_INTERVAL_S = 60.0
_CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
_CORS_HEADERS = "Authorization, Content-Type, X-Request-Id, X-SMG-Routing-Key"


class AuthGate:
    def __init__(
        self,
        gate: Gate,
        now: Callable[[], float],
        *,
        audit: bool = True,
        jwt: JwtVerifier | None = None,
    ) -> None:
        self.core = gate
        self.now = now
        self.audit = audit
        self.jwt = jwt
        self._classes: dict[str, RouteClass] = {}  # canonical route path -> class (one per route)
        self._data_needs_peer = not gate.data_keys
        self._anonymous_served = 0
        self._next_anonymous_warning = -math.inf

    @classmethod
    def from_config(cls, cfg: GatewayConfig, now: Callable[[], float]) -> AuthGate:
        """Parses and checks every auth flag (ConfigError on a bad one) and logs, in one warning,
        what a listener beyond loopback serves only to loopback (or to anyone)."""
        gate = Gate.from_config(cfg)
        obs = cfg.observability
        metrics_host = None
        if obs.prometheus_port > 0:
            metrics_host = obs.prometheus_host or ("::" if ":" in cfg.server.host else "0.0.0.0")
        exposed = gate.exposure(cfg.server.host, metrics_host)
        if exposed:
            log.warning("listener_beyond_loopback", detail="; ".join(exposed))
        verifier = None
        if gate.jwt is not None:  # pyjwt + cryptography cost ~9 MB RSS: only when JWT is on
            from smg.api.jwks import JwtVerifier

            verifier = JwtVerifier(gate.jwt, now)
        return cls(gate, now, audit=not cfg.auth.disable_audit_logging, jwt=verifier)

    def install(self, app: web.Application) -> None:
        if self.core.cors_origins:
            app.on_response_prepare.append(self._cors_headers)
        app.on_cleanup.append(self._close)

    async def _close(self, _: web.Application) -> None:
        if self.jwt is not None:
            await self.jwt.close()

    # --- per request ------------------------------------------------------------------------------
    def route_class(self, request: web.Request) -> RouteClass | None:
        """None when the router matched no route (it answers 404/405 itself)."""
        info = request.match_info
        if info.http_exception is not None:
            return None
        resource = info.route.resource
        path = resource.canonical if resource is not None else request.path
        found = self._classes.get(path)
        if found is None:
            found = self._classes[path] = classify(path)
        return found

    def decide(self, request: web.Request, cls: RouteClass) -> Principal | JwtCheck:
        return self.decide_parts(cls, request.method, request.headers, lambda: request.remote)

    def decide_parts(
        self,
        cls: RouteClass,
        method: str,
        headers: Mapping[str, str],
        remote: Callable[[], str | None],
    ) -> Principal | JwtCheck:
        """`decide` from a request's parts (any edge); `remote()` is asked only when the peer's
        address matters."""
        core = self.core
        peer = remote() if cls is not RouteClass.DATA or self._data_needs_peer else None
        principal = core.decide(cls, method, headers, peer)
        if (
            core.allow_unauthenticated
            and isinstance(principal, Principal)
            and principal.auth_method == "anonymous"
        ):
            self._note_anonymous()
        return principal

    async def verify(self, check: JwtCheck) -> Principal:
        assert self.jwt is not None  # the core asks only when JWT is configured
        return self.core.authorize(await self.jwt.verify(check.token), check.need)

    def _note_anonymous(self) -> None:
        """--allow-unauthenticated: a warning a minute while keyless remote requests are served."""
        self._anonymous_served += 1
        now = self.now()
        if now >= self._next_anonymous_warning:
            log.warning(
                "unauthenticated_data_plane",
                served=self._anonymous_served,
                hint="--allow-unauthenticated serves anyone; set --api-key or --tenant-api-key",
            )
            self._anonymous_served = 0
            self._next_anonymous_warning = now + ANONYMOUS_WARNING_INTERVAL_S

    # --- CORS -------------------------------------------------------------------------------------
    def allowed_origin(self, request: web.BaseRequest) -> str | None:
        return self.origin_allowed(request.headers.get("Origin"))

    def origin_allowed(self, origin: str | None) -> str | None:
        if origin is not None and origin.rstrip("/").lower() in self.core.cors_origins:
            return origin
        return None

    def preflight(self, request: web.Request) -> web.Response | None:
        """The answer to a CORS preflight from an allowed origin (None: not one)."""
        if (
            request.method != "OPTIONS"
            or "Access-Control-Request-Method" not in request.headers
            or self.allowed_origin(request) is None
        ):
            return None
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": _CORS_METHODS,
                "Access-Control-Allow-Headers": _CORS_HEADERS,
                "Access-Control-Max-Age": "3600",
            },
        )

    async def _cors_headers(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        self.add_cors(request.headers.get("Origin"), response)

    def add_cors(self, origin: str | None, response: web.StreamResponse) -> None:
        """The CORS headers on `response` when `origin` is an allowed one (any edge)."""
        origin = self.origin_allowed(origin)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "X-Request-Id, X-SMG-Error-Code"
            response.headers.add("Vary", "Origin")
