"""Who may call which route: the gateway's authentication and authorization decision, pure.

Route classes, decided in one place (`classify`) from the matched route's path:

    PUBLIC   /health /liveness /readiness           nobody is asked for anything
    DATA     /v1/*, /generate and /rerank           --api-key, --tenant-api-key
    ADMIN    everything else: /workers*, /get_loads, control-plane key or JWT, role admin
             /flush_cache, /parse/*, /mesh/*, and any
             route not listed here (fail closed)
    METRICS  /metrics on the Prometheus listener    control-plane credential, any role

The data plane never accepts a control-plane credential and the control plane never accepts a
data-plane key. A plane with no credential configured answers only *local* callers: a loopback
peer that names a loopback Host (so a DNS-rebinding page, whose requests say `Host:
evil.example`, is refused), that no proxy says it relayed (`Forwarded`, `X-Forwarded-For`,
`X-Real-IP`: a reverse proxy on the same host makes every client a loopback peer) and that is
not a browser's cross-site request. `--allow-unauthenticated` opens a keyless data plane to every
peer; nothing opens a keyless control plane.

CSRF. Requests that carry no credential are authorized by where they come from, so a browser on
the operator's machine could be made to send them. Two checks stop that: a body method must carry
a JSON Content-Type (415 otherwise: a cross-origin page can send text/plain or form bodies
without a CORS preflight, never application/json), and a request whose `Origin` is another origin
(or `Sec-Fetch-Site: cross-site` without an Origin) is refused unless `--cors-allowed-origins`
lists it. The control plane applies the origin check to credentialed requests too.

`Gate.decide` takes the route class, method, headers and peer address and returns the caller's
`Principal`, or a `JwtCheck` the shell verifies asynchronously (its signing keys may need a
fetch), or raises an `ApiError`. The data-plane path with a key costs one header read, one
SHA-256 and one dict lookup.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from smg import errors
from smg.config import ConfigError, GatewayConfig
from smg.core.auth_keys import (
    LOOPBACK,
    Principal,
    Role,
    bearer,
    control_plane_table,
    data_plane_key,
    data_plane_table,
    digest,
    role_mapping,
    valid_tenant_id,
)
from smg.core.jwt_rules import JwtSettings, jwt_settings


class RouteClass(Enum):
    PUBLIC = "public"
    DATA = "data"
    ADMIN = "admin"
    METRICS = "metrics"


PUBLIC_PATHS = frozenset({"/health", "/liveness", "/readiness"})
DATA_PATHS = frozenset({"/generate", "/rerank"})
# Under /v1/ but administrative in the Rust gateway (tokenizer management).
ADMIN_UNDER_V1 = ("/v1/tokenizers",)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# A proxy on this host makes every client a loopback peer; one that says it relayed the request
# (as nginx, Envoy and most proxies are set up to) gets no loopback trust.
PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")

DATA_FLAGS = "set --api-key or --tenant-api-key TENANT:KEY (or --allow-unauthenticated)"
CP_FLAGS = "set --control-plane-api-keys ID:NAME:admin:KEY, or --jwt-issuer and --jwt-audience"


def classify(path: str) -> RouteClass:
    if path in PUBLIC_PATHS:
        return RouteClass.PUBLIC
    if path in DATA_PATHS or (path.startswith("/v1/") and not path.startswith(ADMIN_UNDER_V1)):
        return RouteClass.DATA
    return RouteClass.ADMIN


class AuthError(errors.ApiError):
    """A refusal by the gate: `realm` names the plane (WWW-Authenticate), `principal` the caller
    when it was identified but lacks the role (for the audit line)."""

    __slots__ = ("principal", "realm")

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        realm: str,
        principal: Principal | None = None,
    ) -> None:
        super().__init__(status, code, message)
        self.realm = realm
        self.principal = principal


def _realm(cls: RouteClass) -> str:
    return "data-plane" if cls is RouteClass.DATA else "control-plane"


def unsupported_media_type(content_type: str | None) -> errors.ApiError:
    shown = (content_type or "").partition(";")[0].strip()[:64]
    got = f"'{shown}'" if shown.isascii() and shown.isprintable() and shown else "none"
    return errors.ApiError(
        415,
        "unsupported_media_type",
        f"Content-Type must be application/json (got {got})",
        type="invalid_request_error",
    )


def is_json_content_type(content_type: str | None) -> bool:
    """`application/json` or any `type/subtype+json`, parameters allowed, any case."""
    if content_type is None:
        return False
    main = content_type.partition(";")[0].strip().lower()
    return main == "application/json" or ("/" in main and main.endswith("+json"))


@lru_cache(maxsize=1024)
def is_loopback_address(addr: str | None) -> bool:
    """127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 (an IPv4-mapped loopback)."""
    if not addr:
        return False
    return _loopback(addr)


# Asked for every request (the peer, and the Host header's name) with a handful of distinct
# values; `ipaddress` takes ~6 µs to parse one, the cache ~0.1 µs to find it. Bounded: a client
# can vary its Host header at will.
@lru_cache(maxsize=1024)
def _loopback(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr.partition("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def host_name(host: str) -> str:
    """The name in a Host header: `[::1]:80` -> `::1`, `localhost:8080` -> `localhost`."""
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else ""
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else host


def is_local_name(name: str) -> bool:
    return name.lower() == "localhost" or (len(name) <= 64 and is_loopback_address(name))


@lru_cache(maxsize=1024)  # the few Host values a gateway sees (bounded: a client picks its own)
def _local_host(host: str, bound_names: frozenset[str]) -> bool:
    name = host_name(host)
    return is_local_name(name) or name.lower() in bound_names


def beyond_loopback(bind_host: str) -> bool:
    """A listener bound to anything but a loopback address (0.0.0.0 and :: included)."""
    return not is_local_name(bind_host)


@dataclass(frozen=True, slots=True)
class JwtCheck:
    """A bearer token shaped like a JWT on the control plane: the shell verifies it."""

    token: str
    need: Role


class Gate:
    """The decision table, built once from the config."""

    def __init__(
        self,
        *,
        data_keys: dict[bytes, Principal],
        cp_keys: dict[bytes, Principal],
        jwt: JwtSettings | None = None,
        allow_unauthenticated: bool = False,
        trust_tenant_header: bool = False,
        tenant_header: str = "x-smg-tenant-id",
        cors_origins: frozenset[str] = frozenset(),
        bound_host: str = "",
    ) -> None:
        if data_keys.keys() & cp_keys.keys():
            raise ConfigError(
                "a key is configured for both the data plane and the control plane; "
                "give the control plane keys of its own"
            )
        self.data_keys = data_keys
        self.cp_keys = cp_keys
        self.jwt = jwt
        self.cp_configured = bool(cp_keys) or jwt is not None
        self.allow_unauthenticated = allow_unauthenticated
        self.trust_tenant_header = trust_tenant_header
        self.tenant_header = tenant_header
        self.cors_origins = cors_origins
        self.bound_names = frozenset({bound_host.lower()} - {"", "0.0.0.0", "::"})

    @classmethod
    def from_config(cls, cfg: GatewayConfig) -> Gate:
        a = cfg.auth
        origins = set()
        for origin in a.cors_allowed_origins:
            norm = origin.strip().rstrip("/").lower()
            if "://" not in norm:
                raise ConfigError(
                    f"--cors-allowed-origins {origin!r}: expected scheme://host[:port]"
                )
            origins.add(norm)
        if not a.tenant_header_name.strip():
            raise ConfigError("--tenant-header-name must not be empty")
        if a.allow_unauthenticated and (cfg.server.api_key or a.tenant_api_keys):
            raise ConfigError(
                "--allow-unauthenticated opens a keyless data plane; with --api-key or "
                "--tenant-api-key keys are required: drop one or the other"
            )
        return cls(
            data_keys=data_plane_table(cfg.server.api_key, a.tenant_api_keys),
            cp_keys=control_plane_table(a.control_plane_api_keys),
            jwt=jwt_settings(a, role_mapping(a.jwt_role_mapping)),
            allow_unauthenticated=a.allow_unauthenticated,
            trust_tenant_header=a.trust_tenant_header,
            tenant_header=a.tenant_header_name.strip(),
            cors_origins=frozenset(origins),
            bound_host=cfg.server.host,
        )

    # --- the decision -----------------------------------------------------------------------------
    def decide(
        self, cls: RouteClass, method: str, headers: Mapping[str, str], peer: str | None
    ) -> Principal | JwtCheck:
        if method in BODY_METHODS:
            ct = headers.get("Content-Type")
            if ct != "application/json" and not is_json_content_type(ct):
                raise unsupported_media_type(ct)
        if cls is RouteClass.DATA:
            return self._data_plane(headers, peer)
        return self._control_plane(cls, headers, peer)

    def _data_plane(self, headers: Mapping[str, str], peer: str | None) -> Principal:
        if self.data_keys:
            token = data_plane_key(headers)
            if token is None:
                raise errors.missing_api_key()
            principal = self.data_keys.get(digest(token))
            if principal is None:
                raise errors.wrong_api_key()
            if self.trust_tenant_header and principal.auth_method == "api_key":
                return self._header_tenant(principal, headers)
            return principal
        if self.allow_unauthenticated:
            self._refuse_cross_site(headers, RouteClass.DATA)
            if is_loopback_address(peer):
                principal = LOOPBACK
            else:
                principal = Principal(peer or "unknown", "anonymous", f"ip:{peer}")
        else:
            self._require_local(headers, peer, RouteClass.DATA)
            principal = LOOPBACK
        return self._header_tenant(principal, headers) if self.trust_tenant_header else principal

    def _control_plane(
        self, cls: RouteClass, headers: Mapping[str, str], peer: str | None
    ) -> Principal | JwtCheck:
        need = Role.ADMIN if cls is RouteClass.ADMIN else Role.USER
        if not self.cp_configured:
            self._require_local(headers, peer, cls)
            return LOOPBACK
        if cls is RouteClass.ADMIN:
            self._refuse_cross_site(headers, cls)
        token = bearer(headers)
        if token is None:
            raise AuthError(
                401,
                "invalid_api_key",
                "Missing control-plane credential: send `Authorization: Bearer <key or JWT>`",
                realm="control-plane",
            )
        key = digest(token)
        principal = self.cp_keys.get(key)
        if principal is not None:
            return self.authorize(principal, need)
        if self.jwt is not None and token.count(".") == 2:
            return JwtCheck(token, need)
        if key in self.data_keys:
            raise AuthError(
                401,
                "invalid_api_key",
                "A data-plane API key does not open the control plane: use a control-plane key "
                "(--control-plane-api-keys) or a JWT",
                realm="control-plane",
            )
        raise AuthError(
            401, "invalid_api_key", "Invalid control-plane credential", realm="control-plane"
        )

    def authorize(self, principal: Principal, need: Role) -> Principal:
        if principal.role is None or principal.role < need:
            raise AuthError(
                403,
                "admin_role_required",
                "Admin role required for control plane access",
                realm="control-plane",
                principal=principal,
            )
        return principal

    # --- ambient trust ----------------------------------------------------------------------------
    def _require_local(self, headers: Mapping[str, str], peer: str | None, cls: RouteClass) -> None:
        """Loopback peer, loopback Host, not relayed by a proxy, not a cross-site request."""
        # any(map(...)), not any(generator): all in C, no generator resumed per header
        if not is_loopback_address(peer) or any(map(headers.__contains__, PROXY_HEADERS)):
            plane, flags = (
                ("data plane", DATA_FLAGS)
                if cls is RouteClass.DATA
                else ("control plane", CP_FLAGS)
            )
            raise AuthError(
                403,
                "loopback_only",
                f"The {plane} has no credential configured and answers loopback clients only: "
                + flags,
                realm=_realm(cls),
            )
        host = headers.get("Host")
        if host is None or not _local_host(host, self.bound_names):
            raise AuthError(
                403,
                "untrusted_host",
                "A request without a credential must name a loopback Host (localhost, "
                "127.0.0.1, [::1])",
                realm=_realm(cls),
            )
        if "Origin" in headers or "Sec-Fetch-Site" in headers:  # else not a browser's request
            self._refuse_cross_site(headers, cls)

    def cross_site(self, headers: Mapping[str, str]) -> bool:
        origin = headers.get("Origin")
        if origin is None:
            return headers.get("Sec-Fetch-Site") == "cross-site"
        if self.cors_origins and origin.rstrip("/").lower() in self.cors_origins:
            return False
        host = headers.get("Host")
        return host is None or origin.partition("://")[2].lower() != host.lower()

    def _refuse_cross_site(self, headers: Mapping[str, str], cls: RouteClass) -> None:
        if self.cross_site(headers):
            raise AuthError(
                403,
                "cross_origin_forbidden",
                "Cross-origin request refused: allow its origin with --cors-allowed-origins",
                realm=_realm(cls),
            )

    def _header_tenant(self, principal: Principal, headers: Mapping[str, str]) -> Principal:
        value = headers.get(self.tenant_header)
        if value is None or not valid_tenant_id(value := value.strip()):
            return principal
        return Principal(principal.id, principal.auth_method, "header:" + value, principal.role)

    # --- exposure ---------------------------------------------------------------------------------
    def exposure(self, bind_host: str, metrics_host: str | None) -> list[str]:
        """What a listener beyond loopback serves only to loopback (start-up warnings)."""
        out = []
        if beyond_loopback(bind_host):
            if not self.data_keys and self.allow_unauthenticated:
                out.append(
                    f"the data plane on {bind_host} is open to anyone (--allow-unauthenticated)"
                )
            elif not self.data_keys:
                out.append(f"the data plane on {bind_host} answers loopback only: {DATA_FLAGS}")
            if not self.cp_configured:
                out.append(f"the control plane on {bind_host} answers loopback only: {CP_FLAGS}")
        if metrics_host is not None and beyond_loopback(metrics_host) and not self.cp_configured:
            out.append(f"/metrics on {metrics_host} answers loopback only: {CP_FLAGS}")
        return out
