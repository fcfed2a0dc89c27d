"""The sections that make the gateway safe to expose (issue 10): who may call it (auth), TLS on
its listeners and to its workers, what one client can hold (limits), and what the gateway sends
to and accepts from its workers (upstream)."""

from __future__ import annotations

from dataclasses import dataclass

from smg.config.knobs import ConfigError, knob


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Who may call the gateway: data-plane keys, control-plane keys and roles, OIDC/JWT.

    /health, /liveness and /readiness are public; /v1/* and /generate are the data plane
    (--api-key, --tenant-api-key); the rest (/workers, /get_loads, /parse/*, /mesh/*) is the
    control plane (--control-plane-api-keys, --jwt-*), and /metrics takes a control-plane
    credential of any role. A plane without a credential answers loopback clients only.
    """

    tenant_api_keys: tuple[str, ...] = knob(
        (),
        "Data-plane key of one tenant, TENANT:KEY (repeat the flag); the tenant is the caller's "
        "identity for rate limits.",
        flag="--tenant-api-key",
        nargs="append",
    )
    allow_unauthenticated: bool = knob(
        False,
        "Serve the data plane to non-loopback clients without a key (warns each minute it does).",
    )
    control_plane_api_keys: tuple[str, ...] = knob(
        (),
        "Control-plane keys ID:NAME:ROLE:KEY, ROLE admin or user (several after the flag, or "
        "repeat it): admin reaches /workers, /mesh/*, ...; any role reads /metrics.",
        nargs="extend_csv",
    )
    jwt_issuer: str | None = knob(
        None, "OIDC issuer (iss) of control-plane JWTs; needs --jwt-audience."
    )
    jwt_audience: str | None = knob(None, "Audience (aud) control-plane JWTs must carry.")
    jwt_jwks_uri: str | None = knob(
        None,
        "The issuer's signing keys (JWKS): an https:// URL, a file path or file:// URL. Default: "
        "discovered from <issuer>/.well-known/openid-configuration.",
    )
    jwt_role_claim: str = knob(
        "roles", "JWT claim holding the caller's role(s): a string or a list; a.b reads nested."
    )
    jwt_role_mapping: tuple[str, ...] = knob(
        (),
        "IDP_ROLE=admin|user (several after the flag, or repeat it). Without any, claim values "
        "admin/user count as is.",
        nargs="extend_csv",
    )
    disable_audit_logging: bool = knob(
        False,
        "Log no control_plane_audit line per control-plane request.",
        negations=("--control-plane-audit-enabled",),
    )
    trust_tenant_header: bool = knob(
        False,
        "Take the tenant from --tenant-header-name for shared-key and keyless callers (never "
        "for tenant keys). Only behind a proxy that sets the header itself.",
    )
    tenant_header_name: str = knob(
        "x-smg-tenant-id",
        "Header naming the tenant with --trust-tenant-header (--rate-limit-tenant-header: "
        "deprecated alias).",
        aliases=("--rate-limit-tenant-header",),
    )
    cors_allowed_origins: tuple[str, ...] = knob(
        (),
        "Browser origins (scheme://host[:port]) allowed cross-origin: they get CORS headers and "
        "pass the cross-site check (keyless requests and the control plane refuse other origins).",
        nargs="extend",
    )


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS on the gateway's listener and mutual TLS to workers (`https://`, `grpcs://`)."""

    tls_cert_path: str | None = knob(
        None,
        "Server certificate (PEM, leaf first, then its chain): the HTTP and metrics listeners "
        "speak TLS (>= 1.2). Needs --tls-key-path.",
    )
    tls_key_path: str | None = knob(
        None, "Private key (PEM, unencrypted) of --tls-cert-path. Needs --tls-cert-path."
    )
    client_cert_path: str | None = knob(
        None,
        "Client certificate (PEM) presented to https:// and grpcs:// workers (mutual TLS). "
        "Needs --client-key-path.",
    )
    client_key_path: str | None = knob(
        None, "Private key (PEM, unencrypted) of --client-cert-path. Needs --client-cert-path."
    )
    ca_cert_paths: tuple[str, ...] = knob(
        (),
        "CA certificates (PEM) that https:// and grpcs:// workers' certificates must chain to; "
        "repeatable. Unset: the system's trust store.",
        nargs="extend",
    )


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Bounds on what clients can hold: connections, header/body/idle/write timeouts, buffered
    request bytes."""

    max_connections: int = knob(
        -1,
        "Most open client connections (each holds a file descriptor); past it a new connection "
        "gets 503 and is closed. -1: half the open-file limit; 0: no cap.",
    )
    header_timeout_secs: float = knob(
        10.0,
        "A new connection must bring its first request's headers whole within this long, a kept-"
        "alive one within this long of a request's first byte; else it is closed (slowloris). "
        "0: off. (--header-read-timeout-secs: the Rust gateway's name.)",
        aliases=("--header-read-timeout-secs",),
    )
    body_timeout_secs: float = knob(
        30.0,
        "A request body that brings no byte for this long while it is read gets 408 (a stalled "
        "upload would hold its buffer). 0: off.",
    )
    keepalive_timeout_secs: float = knob(
        75.0,
        "An idle keep-alive connection is closed after this long (longer than the usual load "
        "balancer's 60 s idle timeout, so the balancer closes first). "
        "(--idle-connection-timeout-secs: the Rust gateway's name; it must be > 0 here.)",
        aliases=("--idle-connection-timeout-secs",),
    )
    write_timeout_secs: float = knob(
        30.0,
        "A client that takes none of the response bytes waiting for it this long is cut off and "
        "its admission permit freed (it stopped reading a stream). 0: off.",
    )
    max_buffered_request_bytes: int = knob(
        33_554_432,
        "Request-body bytes all requests together may hold in memory (taken before a body is "
        "read, kept until its response ends; a quarter is kept for bodies up to 1/64 of it). A "
        "request waits up to --queue-timeout-secs for room, then 503.",
    )


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """What the gateway sends to workers and accepts back: credentials, allowed addresses,
    response bounds."""

    worker_api_key: str | None = knob(
        None,
        "Bearer key the gateway sends to workers that have no api_key of their own "
        "(never the clients' keys).",
    )
    provider_byok: bool = knob(
        False,
        "Bring-your-own-key for provider workers (the Rust gateway's auth passthrough): send "
        "the client's own key (its Authorization Bearer, else x-api-key) to the provider instead "
        "of the worker's; a client key that is one of the gateway's own is never sent.",
    )
    worker_url_allowlist: tuple[str, ...] = knob(
        (),
        "CIDRs workers may be in; set: every other address is refused (at registration and at "
        "connect). Link-local and metadata addresses stay refused.",
        nargs="*",
    )
    worker_url_denylist: tuple[str, ...] = knob(
        (),
        "CIDRs workers may never be in, on top of the defaults (link-local, cloud metadata, "
        "0.0.0.0/8, multicast, broadcast, unspecified).",
        nargs="*",
    )
    max_upstream_response_bytes: int = knob(
        33_554_432,
        "Largest non-streamed HTTP answer read from a worker, and most bytes one gRPC Generate "
        "call may send; past it the answer is cut (502) and counts as the worker's failure.",
    )
    upstream_idle_timeout_secs: float = knob(
        300.0,
        "Longest silence of a worker's streamed answer (before the first token included); then "
        "the stream is cut and counts as the worker's failure. 0: no idle limit.",
    )
    upstream_connect_timeout_secs: float = knob(
        10.0, "Deadline to open a connection to a worker; a failed connect is retried elsewhere."
    )


def effective_max_connections(limits: LimitsConfig, open_files: int) -> int:
    """-1 sizes the cap from the open-file limit: half of it for client connections, the other
    half for upstream connections, listeners and files; 0 means no cap."""
    if limits.max_connections < 0:
        return max(64, open_files // 2)
    return limits.max_connections


def check_limits(limits: LimitsConfig) -> None:
    for name in ("header_timeout_secs", "body_timeout_secs", "write_timeout_secs"):
        if getattr(limits, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (0 turns it off)")
    if limits.keepalive_timeout_secs <= 0:
        raise ConfigError("--keepalive-timeout-secs must be > 0")
    if limits.max_buffered_request_bytes <= 0:
        raise ConfigError("--max-buffered-request-bytes must be > 0")
