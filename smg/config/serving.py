"""The sections that decide how requests are served: listener, workers, routing, PD, admission,
retries, breakers, health checks, observability and rate limits (the tokenizers' section is
tokenizer.py, the mesh node's mesh_node.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from smg.config.knobs import ConfigError, knob

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
    workers: int = knob(
        0,
        "smg's own flag (the Rust gateway has none): gateway processes serving --port together "
        "(SO_REUSEPORT), sharing workers, admin changes, rate limits and cache hints over a "
        "private loopback mesh; one /metrics with a `process` label. 0: the number of cores, "
        "or 1 when the config keeps state one process cannot share (--history-backend memory). "
        "In a cluster (smg node, --enable-mesh) each process joins it on --mesh-port + its index. "
        "1: a single process.",
    )


@dataclass(frozen=True, slots=True)
class WorkersConfig:
    worker_urls: tuple[str, ...] = knob(
        (),
        "Workers to front (http://host:port; repeatable); more can be added at /workers.",
        nargs="extend",
    )
    backend: str = knob(
        "sglang",
        "What --worker-urls are: sglang or vllm servers (today's behaviour), or an external "
        "provider's API base (openai: OpenAI-compatible, passed through; anthropic: translated "
        "to Messages); provider workers are runtime_type external, keyed by --worker-api-key.",
        choices=("sglang", "openai", "anthropic", "vllm", "tokenspeed"),
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
        (), "Decode worker URL; repeat the flag for more.", nargs="append"
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
    enable_igw: bool = knob(
        False,
        "Inference-gateway mode: many models side by side, each request routed by its `model` "
        "(a native request without one is refused: 400 missing_model), a model with its own "
        "policy when its first worker names one (POST /workers `policy`).",
    )
    dp_aware: bool = knob(
        False,
        "An engine reporting N data-parallel ranks (gRPC GetServerInfo, HTTP /server_info: "
        "dp_size) is served as N workers url@0..url@N-1, each request carrying its rank "
        "(data_parallel_rank: in the gRPC message, in an HTTP request's JSON body).",
    )
    model_alias: tuple[str, ...] = knob(
        (),
        "ALIAS=CANONICAL: requests for ALIAS go to CANONICAL's workers, as CANONICAL "
        "(repeatable; a model actually served under ALIAS wins).",
        nargs="append",
    )
    cache_threshold: float = knob(
        0.3,
        "cache_aware: least matched-prefix share that pins a request to the matching worker.",
        aliases=("--cache-match-threshold",),
    )
    balance_abs_threshold: int = knob(
        64,
        "cache_aware: max-min load gap (requests) that, with the ratio, means imbalance.",
        aliases=("--spill-abs-threshold",),
    )
    balance_rel_threshold: float = knob(
        1.5,
        "cache_aware: max/min load ratio that, with the gap, routes to the least loaded.",
        aliases=("--spill-rel-threshold",),
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
    disable_health_check: bool = knob(
        False,
        "No health checks: a worker is probed only until its first good check (which learns its "
        "model and tokenizer), then counts as healthy for good (its breaker still applies).",
    )
    remove_unhealthy_workers: bool = knob(
        False,
        "Remove a worker from the registry once it is marked failed (--health-failed-after-secs), "
        "so a re-registration probes it afresh.",
        aliases=("--worker-auto-recovery",),
        negations=("--no-remove-unhealthy-workers", "--no-worker-auto-recovery"),
    )
    worker_startup_timeout_secs: float = knob(
        1800.0,
        "A worker not ready this long after it was added is removed (its registration failed, "
        "as in the Rust gateway); large models can take long to load.",
    )
    worker_startup_delay: float = knob(
        0.0, "Seconds to leave a new worker alone before its first check."
    )
    worker_startup_check_interval: float = knob(
        30.0,
        "Longest wait between checks of a worker that has not been ready yet (smg checks sooner: "
        "backoff from 0.5 s up to 2 s, so an engine serves within ~2 s of coming up).",
    )


@dataclass(frozen=True, slots=True)
class ObservabilityConfig:
    prometheus_host: str | None = knob(
        None, "Metrics listener address; default: the unspecified address of --host's family."
    )
    prometheus_port: int = knob(29000, "Metrics listener port (0 disables it).")
    prometheus_duration_buckets: tuple[str, ...] = knob(
        (),
        "Histogram buckets (seconds, ascending) for every *_duration_seconds, TTFT and TPOT "
        "series; default: the Rust gateway's 0.001 ... 7200.",
    )
    log_level: str = knob("info", "Log level.", choices=("debug", "info", "warn", "error"))
    log_json: bool = knob(False, "Log as JSON lines.")
    log_dir: str | None = knob(
        None,
        "Also log to files in this directory: smg.YYYY-MM-DD (UTC), a new one each day, the "
        "newest 7 kept.",
    )
    enable_trace: bool = knob(False, "Enable OpenTelemetry tracing (OTLP over gRPC).")
    otlp_traces_endpoint: str = knob(
        "localhost:4317", "OTLP collector endpoint (format: host:port)."
    )


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    rate_limit_tokens_per_second: float = knob(
        0.0,
        "Requests per second admitted per caller (the tenant of its credential); cluster-wide "
        "when the mesh is on. 0: no rate limit.",
    )
    rate_limit_window_secs: float = knob(1.0, "Length of one rate-limit counting window.")


def check_health(health: HealthConfig) -> None:
    """The Rust gateway's checks: a start-up timeout and check interval above zero; no
    negative delay."""
    if health.worker_startup_timeout_secs <= 0:
        raise ConfigError("--worker-startup-timeout-secs must be greater than 0")
    if health.worker_startup_check_interval <= 0:
        raise ConfigError("--worker-startup-check-interval must be greater than 0")
    if health.worker_startup_delay < 0:
        raise ConfigError("--worker-startup-delay must not be negative")


def effective_max_concurrency(adm: AdmissionConfig, cores: int) -> int:
    """-1 derives the bound from the host, as the Rust gateway does; 0 means unlimited."""
    if adm.max_concurrent_requests < 0:
        return max(4096, 1024 * cores)
    return adm.max_concurrent_requests


def effective_max_attempts(retry: RetryConfig) -> int:
    return 1 if retry.disable_retries else max(1, retry.retry_max_retries)


def model_aliases(entries: tuple[str, ...]) -> dict[str, str]:
    """`--model-alias` entries as alias -> canonical; ConfigError (the Rust gateway's words) on a
    malformed entry or an alias naming two models."""
    aliases: dict[str, str] = {}
    for entry in entries:
        alias, eq, canonical = entry.partition("=")
        if not eq:
            raise ConfigError(f"Invalid model-alias value '{entry}'. Expected: <alias>=<canonical>")
        if not alias or not canonical:
            raise ConfigError(
                f"Invalid model-alias value '{entry}'. Alias and canonical model ID must be "
                "non-empty"
            )
        if alias == canonical:
            raise ConfigError(
                f"Invalid model-alias value '{entry}'. Alias must differ from the canonical "
                "model ID"
            )
        previous = aliases.setdefault(alias, canonical)
        if previous != canonical:
            raise ConfigError(
                f"--model-alias {alias}: alias maps to both '{previous}' and '{canonical}'"
            )
    return aliases


def duration_buckets(cfg: ObservabilityConfig) -> tuple[float, ...] | None:
    """--prometheus-duration-buckets as numbers (None: the default buckets); raises ConfigError
    for a value that is not a positive finite number or a list that is not strictly ascending."""
    if not cfg.prometheus_duration_buckets:
        return None
    out: list[float] = []
    for text in cfg.prometheus_duration_buckets:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(
                f"--prometheus-duration-buckets: {text!r} is not a positive number of seconds"
            )
        if out and value <= out[-1]:
            raise ConfigError("--prometheus-duration-buckets: the bounds must be ascending")
        out.append(value)
    return tuple(out)
