"""The one config tree. Flags, env vars (`SMG_<FLAG>`) and defaults are generated from it.

Each knob is a field of a frozen dataclass, declared with `knob(default, help)`; its CLI flag is the
field name with dashes unless `flag=` says otherwise (flag names and defaults follow the Rust
gateway, so its users can switch without relearning). `smg/cli.py` walks this tree to build the
argument parser, so a knob exists exactly once.

The tree is split by concern: `knobs` (the declaration helper, ConfigError, tree helpers),
`serving` (how requests are served), `tokenizer` (gRPC mode's tokenizers and parsers),
`mesh_node` (the gateway mesh), `exposure` (auth, TLS, client limits, upstream bounds),
`storage` (stored responses and conversations), `mcp` (the MCP servers file);
`GatewayConfig` and `SimConfig` compose them here, and every name is importable from
`smg.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smg.config.discovery import DiscoveryConfig
from smg.config.exposure import (
    AuthConfig,
    LimitsConfig,
    TlsConfig,
    UpstreamConfig,
    check_limits,
    effective_max_connections,
)
from smg.config.knobs import ConfigError, knob, replace_path, sections
from smg.config.mcp import McpConfig, McpFlagsConfig, load_mcp_config
from smg.config.mesh_node import MeshNodeConfig
from smg.config.serving import (
    POLICIES,
    AdmissionConfig,
    CircuitBreakerConfig,
    HealthConfig,
    ObservabilityConfig,
    PdConfig,
    RateLimitConfig,
    RetryConfig,
    RoutingConfig,
    ServerConfig,
    WorkersConfig,
    check_health,
    duration_buckets,
    effective_max_attempts,
    effective_max_concurrency,
    model_aliases,
)
from smg.config.storage import HISTORY_BACKENDS, StorageConfig, check_storage
from smg.config.tokenizer import TokenizerConfig

__all__ = [
    "HISTORY_BACKENDS",
    "POLICIES",
    "AdmissionConfig",
    "AuthConfig",
    "CircuitBreakerConfig",
    "ConfigError",
    "DiscoveryConfig",
    "GatewayConfig",
    "HealthConfig",
    "LimitsConfig",
    "McpConfig",
    "McpFlagsConfig",
    "MeshNodeConfig",
    "ObservabilityConfig",
    "PdConfig",
    "RateLimitConfig",
    "RetryConfig",
    "RoutingConfig",
    "ServerConfig",
    "SimConfig",
    "StorageConfig",
    "TlsConfig",
    "TokenizerConfig",
    "UpstreamConfig",
    "WorkersConfig",
    "check_health",
    "check_limits",
    "check_storage",
    "duration_buckets",
    "effective_max_attempts",
    "effective_max_concurrency",
    "effective_max_connections",
    "knob",
    "load_mcp_config",
    "model_aliases",
    "replace_path",
    "sections",
]


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
    storage: StorageConfig = field(default_factory=StorageConfig)
    mcp: McpFlagsConfig = field(default_factory=McpFlagsConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulated OpenAI-compatible worker (`smg sim`)."""

    host: str = knob("127.0.0.1", "Address the simulated worker binds.")
    port: int = knob(8000, "Port of the simulated worker.")
    model: str = knob("sim-model", "Model id the worker serves.")
    adapters: tuple[str, ...] = knob(
        (),
        "LoRA adapter ids served besides --model (listed after it by /v1/models, as vLLM does).",
        nargs="extend",
    )
    first_token_ms: float = knob(0.0, "Latency before the first token (or the whole answer).")
    tokens_per_second: float = knob(0.0, "Decode speed after the first token; 0: no delay.")
    output_tokens: int = knob(16, "Tokens per answer when the request sets no max_tokens.")
    failure_rate: float = knob(0.0, "Share of requests answered 500, at random.")
    seed: int = knob(0, "Seed of the worker's randomness (output text, failures).")
    unhealthy: bool = knob(False, "Start with /health answering 503 (toggle at /sim/health).")
    health_delay_ms: float = knob(
        0.0, "Delay of every /health answer (a slow probe; change it at /sim/config)."
    )
    script: str | None = knob(
        None,
        'Scripted replies: a JSON file [{"when": "text in a message", "reply": "exact text"}, '
        "...]; a user message with SIM_REPLY: is answered with the rest of it in any case.",
    )
    role: str = knob(
        "regular",
        "PD role: decode insists on bootstrap_host/port/room; prefill answers one token.",
        choices=("regular", "prefill", "decode"),
    )
    bootstrap_port: int | None = knob(
        None, "KV bootstrap port reported in /get_server_info (prefill role)."
    )
    dp_size: int = knob(
        1, "Data-parallel ranks reported (/server_info dp_size) and accepted (data_parallel_rank)."
    )
    tls_cert_path: str | None = knob(
        None, "Serve over TLS (HTTPS, or gRPC over TLS with --grpc) with this certificate (PEM)."
    )
    tls_key_path: str | None = knob(None, "Private key (PEM) of --tls-cert-path.")
    tls_client_ca_path: str | None = knob(
        None, "Require client certificates signed by this CA (PEM): mutual TLS."
    )
    provider: str | None = knob(
        None,
        "Stand in for an external provider instead (its documented wire format, auth header, "
        "errors, model listing and streaming): openai, anthropic or gemini.",
        choices=("openai", "anthropic", "gemini"),
    )
    provider_keys: tuple[str, ...] = knob(
        ("sim-key",), "--provider: the API keys it accepts (others get its 401).", nargs="*"
    )
