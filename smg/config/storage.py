"""Where responses and conversations are stored (`--history-backend`; flag names and defaults
follow the Rust gateway, plus `sqlite`, which it lacks)."""

from __future__ import annotations

from dataclasses import dataclass

from smg.config.knobs import ConfigError, knob

HISTORY_BACKENDS = ("memory", "none", "sqlite", "postgres", "redis")


@dataclass(frozen=True, slots=True)
class StorageConfig:
    history_backend: str = knob(
        "memory",
        "Where stored responses and conversations live: memory (bounded, one process), none "
        "(store nothing), sqlite (one file), postgres or redis (shared by every node).",
        choices=HISTORY_BACKENDS,
    )
    history_max_records: int = knob(
        10_000, "memory backend: most responses + conversations kept; least recently used go."
    )
    history_max_bytes: int = knob(
        256 * 1024 * 1024, "memory backend: most bytes of stored JSON kept (256 MiB)."
    )
    history_memory_max_responses: int = knob(
        10_000,
        "memory backend: most stored responses kept; the oldest stored go first, on every write "
        "(one still running in the background is skipped).",
    )
    history_memory_max_items: int = knob(
        100_000,
        "memory backend: most conversation items kept in all; the oldest added go first, out of "
        "their conversation.",
    )
    history_memory_retention_secs: float = knob(
        86_400.0,
        "memory backend: a response is dropped this long after it was stored, a conversation this "
        "long after its last use (checked on every write); 0: kept until a count bound drops it.",
    )
    history_timeout_secs: float = knob(
        5.0,
        "Deadline of one storage call; past it the request gets an explicit error "
        "(--postgres-op-timeout-secs, --redis-op-timeout-secs: the Rust gateway's names).",
        aliases=("--postgres-op-timeout-secs", "--redis-op-timeout-secs"),
        env_aliases=("POSTGRES_OP_TIMEOUT_SECS", "REDIS_OP_TIMEOUT_SECS"),
    )
    sqlite_path: str | None = knob(None, "sqlite backend: the database file (created if absent).")
    postgres_db_url: str | None = knob(
        None,
        "postgres backend: connection URL (postgresql://user:pass@host:port/db).",
        env_aliases=("POSTGRES_DB_URL",),
    )
    postgres_pool_max_size: int = knob(
        16,
        "postgres backend: most pooled connections.",
        aliases=("--postgres-pool-max",),
        env_aliases=("POSTGRES_POOL_MAX",),
    )
    redis_url: str | None = knob(
        None, "redis backend: connection URL (redis://host:port/db).", env_aliases=("REDIS_URL",)
    )
    redis_pool_max_size: int = knob(
        16,
        "redis backend: most pooled connections.",
        aliases=("--redis-pool-max",),
        env_aliases=("REDIS_POOL_MAX",),
    )
    redis_retention_days: int = knob(
        30,
        "redis backend: days a stored record lives (a TTL); -1 keeps records forever.",
        env_aliases=("REDIS_RETENTION_DAYS",),
    )
    max_background_responses: int = knob(
        64,
        "Background responses (POST /v1/responses with background: true) running or waiting "
        "at once; past it 429. 0 switches background mode off: such requests run in the "
        "foreground (as in the Rust gateway).",
    )


_NEEDS = {"sqlite": "sqlite_path", "postgres": "postgres_db_url", "redis": "redis_url"}


def check_storage(cfg: StorageConfig) -> None:
    """A storage config that cannot be served: ConfigError, one line, never the URL itself."""
    needed = _NEEDS.get(cfg.history_backend)
    if needed is not None and not getattr(cfg, needed):
        flag = needed.replace("_", "-")
        raise ConfigError(f"--history-backend {cfg.history_backend} needs --{flag}")
    for name in ("history_max_records", "history_max_bytes", "postgres_pool_max_size",
                 "redis_pool_max_size", "history_memory_max_responses",
                 "history_memory_max_items"):  # fmt: skip
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    if cfg.history_memory_retention_secs < 0:
        raise ConfigError("--history-memory-retention-secs must be >= 0 (0: no age bound)")
    if cfg.max_background_responses < 0:
        raise ConfigError("--max-background-responses must be >= 0 (0: background mode off)")
    if cfg.history_timeout_secs <= 0:
        raise ConfigError("--history-timeout-secs must be > 0")
    if cfg.redis_retention_days == 0 or cfg.redis_retention_days < -1:
        raise ConfigError("--redis-retention-days must be >= 1, or -1 to keep records forever")
