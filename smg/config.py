"""The one config tree. Flags, env vars (`SMG_<FLAG>`) and defaults are generated from it.

Each knob is a field of a frozen dataclass, declared with `knob(default, help)`; its CLI flag is the
field name with dashes unless `flag=` says otherwise (flag names and defaults follow the Rust
gateway, so its users can switch without relearning). `smg/cli.py` walks this tree to build the
argument parser, so a knob exists exactly once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

POLICIES = (
    "round_robin",
    "random",
    "power_of_two",
    "cache_aware",
    "consistent_hashing",
    "manual",
    "least_load",
    "prefix_hash",
    "bucket",
)


class ConfigError(ValueError):
    """A config that cannot be served safely or does not parse: `smg launch` exits with it."""


def knob(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    choices: tuple[str, ...] | None = None,
    nargs: str | None = None,
) -> Any:
    """A config field with its CLI metadata. Mutable defaults must be tuples."""
    meta = {"help": help, "flag": flag, "aliases": aliases, "choices": choices, "nargs": nargs}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = knob("0.0.0.0", "Address the gateway's HTTP server binds.")
    port: int = knob(30000, "Port of the gateway's HTTP server.")
    max_payload_size: int = knob(
        536_870_912,
        "Largest request body accepted, in bytes; larger ones get 413 (the body budget, "
        "--max-buffered-request-bytes, bounds it too).",
    )
    api_key: str | None = knob(
        None,
        "Shared data-plane key: clients send `Authorization: Bearer KEY` to /v1/* and /generate. "
        "It never opens the control plane (see --control-plane-api-keys) and is never sent to "
        "workers (see --worker-api-key). With no data-plane key the data plane answers loopback "
        "clients only (see --allow-unauthenticated).",
    )
    request_timeout_secs: float = knob(
        1800.0,
        "Deadline for the whole upstream part of a request, retries and streaming included.",
    )
    shutdown_grace_period_secs: float = knob(
        180.0, "On SIGTERM, how long in-flight requests may take to finish before exit."
    )


@dataclass(frozen=True, slots=True)
class WorkersConfig:
    worker_urls: tuple[str, ...] = knob(
        (), "Workers to front (http://host:port); more can be added at /workers.", nargs="*"
    )


@dataclass(frozen=True, slots=True)
class PdConfig:
    """Prefill/decode disaggregation (SGLang style): each request goes to a prefill and a decode
    worker at once, both told where the prefill worker's KV bootstrap server listens."""

    pd_disaggregation: bool = knob(False, "Route every request to a prefill + decode pair.")
    prefill: tuple[str, ...] = knob(
        (),
        "Prefill worker: URL [BOOTSTRAP_PORT|none]; repeat the flag for more.",
        nargs="append+",
    )
    decode: tuple[str, ...] = knob(
        (), "Decode worker URL; repeat the flag for more.", nargs="append+"
    )
    prefill_policy: str | None = knob(
        None, "Policy choosing the prefill worker (default: --policy).", choices=POLICIES
    )
    decode_policy: str | None = knob(
        None, "Policy choosing the decode worker (default: --policy).", choices=POLICIES
    )


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    policy: str = knob("cache_aware", "Load-balancing policy.", choices=POLICIES)
    cache_threshold: float = knob(
        0.3,
        "cache_aware: least matched-prefix share that pins a request to the matching worker.",
        aliases=("--cache-match-threshold",),
    )
    balance_abs_threshold: int = knob(
        64, "cache_aware: max-min load gap (requests) that, with the ratio, means imbalance."
    )
    balance_rel_threshold: float = knob(
        1.5, "cache_aware: max/min load ratio that, with the gap, routes to the least loaded."
    )
    eviction_interval_secs: float = knob(
        60.0,
        "cache_aware: seconds between LRU evictions of the prefix tree.",
        aliases=("--eviction-interval",),
    )
    max_tree_size: int = knob(
        67_108_864, "cache_aware: most characters (tokens) a worker keeps in a model's tree."
    )
    max_tree_bytes: int = knob(
        67_108_864,
        "cache_aware: memory (estimated bytes) all prefix trees may take together, every model "
        "and worker; evicted from 90% on, new prefixes unrecorded at 100%.",
    )
    block_size: int = knob(16, "KV cache block size (tokens) for event-driven cache-aware routing.")
    disable_kv_events: bool = knob(
        False,
        "cache_aware: route on the approximate prefix tree only; no SubscribeKvEvents streams.",
    )
    load_monitor_interval: float = knob(
        10.0, "Seconds between polls of the workers' loads (GetLoads, /get_load)."
    )
    disable_load_monitoring: bool = knob(
        False, "Poll loads only when a load-aware policy needs them."
    )
    prefix_token_count: int = knob(
        256, "prefix_hash: leading tokens hashed (untokenized requests: four times as many chars)."
    )
    prefix_hash_load_factor: float = knob(
        1.25, "prefix_hash: load (multiple of the mean) above which it walks the ring."
    )
    prefix_hash_balance_abs_threshold: int = knob(
        10, "prefix_hash: load over the mean a worker must also exceed to count as overloaded."
    )
    least_load_kv_pressure_weight: float = knob(
        0.15, "least_load: weight (seconds) of KV-cache pressure in the expected wait."
    )
    least_load_default_throughput: float = knob(
        2000.0, "least_load: tokens/s assumed when a worker reports no throughput."
    )
    least_load_mean_prefill_tokens: int = knob(
        1024, "least_load: prefill tokens assumed for a request whose length is unknown."
    )
    least_load_max_waiting_requests: int = knob(
        0, "least_load: skip workers with this many waiting requests (0: no cap)."
    )
    bucket_adjust_interval_secs: float = knob(
        5.0, "bucket: seconds between refits of the length ranges per worker."
    )


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    max_concurrent_requests: int = knob(
        -1,
        "Most requests in flight (permit held until the body ends); -1: 1024 per core, at least "
        "4096; 0: unlimited.",
    )
    queue_size: int = knob(100, "Requests that may wait for a permit; 0: answer 429 at once.")
    queue_timeout_secs: float = knob(60.0, "Longest wait for a permit before 408.")


@dataclass(frozen=True, slots=True)
class RetryConfig:
    retry_max_retries: int = knob(5, "Most attempts per request, the first included.")
    retry_initial_backoff_ms: int = knob(50, "Backoff before the first retry.")
    retry_max_backoff_ms: int = knob(30000, "Cap on one backoff.")
    retry_backoff_multiplier: float = knob(1.5, "Growth of the backoff per retry.")
    retry_jitter_factor: float = knob(0.2, "Backoff is multiplied by 1 +/- this, at random.")
    disable_retries: bool = knob(False, "One attempt per request.")


@dataclass(frozen=True, slots=True)
class CircuitBreakerConfig:
    cb_failure_threshold: int = knob(10, "Consecutive failures that open a worker's breaker.")
    cb_success_threshold: int = knob(3, "Successes in half-open that close it again.")
    cb_timeout_duration_secs: float = knob(60.0, "How long a breaker stays open before a trial.")
    cb_window_duration_secs: float = knob(
        120.0, "Failures older than this no longer count towards opening."
    )
    disable_circuit_breaker: bool = knob(False, "Never open breakers.")


@dataclass(frozen=True, slots=True)
class HealthConfig:
    health_failure_threshold: int = knob(3, "Consecutive failed checks before not_ready.")
    health_success_threshold: int = knob(2, "Consecutive good checks before ready.")
    health_check_timeout_secs: float = knob(5.0, "Deadline of one health check.")
    health_check_interval_secs: float = knob(60.0, "Seconds between health checks of a worker.")
    health_check_endpoint: str = knob("/health", "Path probed on HTTP workers.")
    health_failed_after_secs: float = knob(
        300.0, "A worker not_ready this long is marked failed (still probed; it can come back)."
    )


@dataclass(frozen=True, slots=True)
class TokenizerConfig:
    """gRPC mode: the gateway templates and tokenizes; engines see only token ids."""

    model_path: str | None = knob(
        None,
        "Local model folder holding tokenizer.json (+ tokenizer_config.json with the chat "
        "template). Unset: each gRPC engine's tokenizer is fetched with GetTokenizer.",
        aliases=("--model",),
    )
    tokenizer_path: str | None = knob(None, "Tokenizer folder; overrides --model-path.")
    chat_template: str | None = knob(None, "Chat template file overriding the tokenizer's.")
    tokenizer_cache_dir: str | None = knob(
        None, "Where engine tokenizers are cached on disk (default ~/.cache/smg/tokenizers)."
    )
    tokenizer_cache_enable_l0: bool = knob(False, "Exact-match token cache (repeated prompts).")
    tokenizer_cache_l0_max_entries: int = knob(10_000, "Most entries in the L0 cache.")
    tokenizer_cache_l0_max_memory: int = knob(268_435_456, "Bytes the L0 cache may hold.")
    tokenizer_cache_enable_l1: bool = knob(
        False, "Prefix token cache at special-token boundaries (multi-turn chats)."
    )
    tokenizer_cache_l1_max_memory: int = knob(52_428_800, "Bytes the L1 cache may hold.")
    reasoning_parser: str | None = knob(
        None, "Reasoning format (deepseek_r1, qwen3, kimi, ...); default: detected from the model."
    )
    tool_call_parser: str | None = knob(
        None,
        "Tool-call format (json, qwen, llama, mistral, ...); default: detected from the model.",
    )


@dataclass(frozen=True, slots=True)
class ObservabilityConfig:
    prometheus_host: str | None = knob(
        None, "Metrics listener address; default: the unspecified address of --host's family."
    )
    prometheus_port: int = knob(29000, "Metrics listener port (0 disables it).")
    log_level: str = knob("info", "Log level.", choices=("debug", "info", "warn", "error"))
    log_json: bool = knob(False, "Log as JSON lines.")


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    rate_limit_tokens_per_second: float = knob(
        0.0,
        "Requests per second admitted per caller (the tenant of its credential); cluster-wide "
        "when the mesh is on. 0: no rate limit.",
    )
    rate_limit_window_secs: float = knob(1.0, "Length of one rate-limit counting window.")


@dataclass(frozen=True, slots=True)
class MeshNodeConfig:
    """The gateway mesh: SWIM membership + replicated state (`smg node --join`)."""

    enable_mesh: bool = knob(False, "Join a gateway mesh (`smg node` turns this on).")
    mesh_server_name: str | None = knob(
        None, "This node's name in the mesh (default: the host name and mesh port)."
    )
    mesh_host: str = knob("0.0.0.0", "Address the mesh listener (UDP + TCP) binds.")
    mesh_advertise_host: str | None = knob(
        None, "Address peers reach this node at; required when --mesh-host is 0.0.0.0."
    )
    mesh_port: int = knob(39527, "Mesh port (UDP gossip and TCP state sync share it).")
    mesh_peer_urls: tuple[str, ...] = knob(
        (), "Peers to join (host:port).", aliases=("--join",), nargs="*"
    )
    cluster_key: str | None = knob(
        None,
        "Primary mesh key (16+ characters, no blanks or commas): every mesh packet and frame is "
        "encrypted with it (AES-256-GCM). Required unless --mesh-host is loopback.",
    )
    cluster_key_secondary: tuple[str, ...] = knob(
        (),
        "More mesh keys, tried to decrypt but never to encrypt: for rotating --cluster-key "
        "without splitting the cluster (repeat the flag, or list them comma-separated).",
        nargs="append+",
    )
    mesh_insecure: bool = knob(
        False,
        "Run a mesh beyond loopback without --cluster-key: plaintext and unauthenticated, "
        "anyone who reaches the port joins. Logs a warning every minute. Never in production.",
    )
    mesh_profile: str = knob(
        "lan", "Failure-detector timing profile.", choices=("lan", "local", "test")
    )
    mesh_fault_injection: bool = knob(
        False, "Expose POST /mesh/faults (drop/delay/partition) for chaos tests. Never in prod."
    )


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
        "Control-plane key ID:NAME:ROLE:KEY, ROLE admin or user (repeat the flag): admin reaches "
        "/workers, /mesh/*, ...; any role reads /metrics.",
        nargs="append",
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
        "IDP_ROLE=admin|user (repeat the flag). Without any, claim values admin/user count as is.",
        nargs="append",
    )
    disable_audit_logging: bool = knob(
        False, "Log no control_plane_audit line per control-plane request."
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
        nargs="*",
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
        "0: off.",
    )
    body_timeout_secs: float = knob(
        30.0,
        "A request body that brings no byte for this long while it is read gets 408 (a stalled "
        "upload would hold its buffer). 0: off.",
    )
    keepalive_timeout_secs: float = knob(
        75.0,
        "An idle keep-alive connection is closed after this long (longer than the usual load "
        "balancer's 60 s idle timeout, so the balancer closes first).",
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


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    pd: PdConfig = field(default_factory=PdConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    breaker: CircuitBreakerConfig = field(default_factory=CircuitBreakerConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    mesh: MeshNodeConfig = field(default_factory=MeshNodeConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulated OpenAI-compatible worker (`smg sim`)."""

    host: str = knob("127.0.0.1", "Address the simulated worker binds.")
    port: int = knob(8000, "Port of the simulated worker.")
    model: str = knob("sim-model", "Model id the worker serves.")
    first_token_ms: float = knob(0.0, "Latency before the first token (or the whole answer).")
    tokens_per_second: float = knob(0.0, "Decode speed after the first token; 0: no delay.")
    output_tokens: int = knob(16, "Tokens per answer when the request sets no max_tokens.")
    failure_rate: float = knob(0.0, "Share of requests answered 500, at random.")
    seed: int = knob(0, "Seed of the worker's randomness (output text, failures).")
    unhealthy: bool = knob(False, "Start with /health answering 503 (toggle at /sim/health).")
    role: str = knob(
        "regular",
        "PD role: decode insists on bootstrap_host/port/room; prefill answers one token.",
        choices=("regular", "prefill", "decode"),
    )
    bootstrap_port: int | None = knob(
        None, "KV bootstrap port reported in /get_server_info (prefill role)."
    )
    tls_cert_path: str | None = knob(
        None, "Serve over TLS (HTTPS, or gRPC over TLS with --grpc) with this certificate (PEM)."
    )
    tls_key_path: str | None = knob(None, "Private key (PEM) of --tls-cert-path.")
    tls_client_ca_path: str | None = knob(
        None, "Require client certificates signed by this CA (PEM): mutual TLS."
    )


def sections(cfg_type: type) -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(cfg_type))


def replace_path(cfg: Any, section: str, **changes: Any) -> Any:
    """`replace_path(gw, "retry", retry_max_retries=1)`: a copy with one section changed."""
    return dataclasses.replace(
        cfg, **{section: dataclasses.replace(getattr(cfg, section), **changes)}
    )


def effective_max_concurrency(adm: AdmissionConfig, cores: int) -> int:
    """-1 derives the bound from the host, as the Rust gateway does; 0 means unlimited."""
    if adm.max_concurrent_requests < 0:
        return max(4096, 1024 * cores)
    return adm.max_concurrent_requests


def effective_max_attempts(retry: RetryConfig) -> int:
    return 1 if retry.disable_retries else max(1, retry.retry_max_retries)


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
