"""The storage section of the config (smg/config/storage.py): the flags the Rust gateway names, and
the start-time check (a backend without its URL/path, a bad bound: one-line ConfigError)."""

from __future__ import annotations

import dataclasses

import pytest

from smg.cli import gateway_config_from, parse
from smg.config import HISTORY_BACKENDS, ConfigError, StorageConfig, check_storage


def _storage(*argv: str) -> StorageConfig:
    _, ns = parse(list(argv))
    cfg: StorageConfig = gateway_config_from(ns).storage
    return cfg


def test_defaults_and_flags() -> None:
    assert _storage() == StorageConfig()
    assert StorageConfig().history_backend == "memory"
    assert StorageConfig().redis_retention_days == 30
    cfg = _storage(
        "--history-backend", "redis", "--redis-url", "redis://h:1/0",
        "--redis-retention-days", "-1", "--sqlite-path", "/x.db",
        "--postgres-db-url", "postgresql://h/db", "--postgres-pool-max-size", "3",
    )  # fmt: skip
    assert (cfg.history_backend, cfg.redis_url, cfg.redis_retention_days) == (
        "redis", "redis://h:1/0", -1,
    )  # fmt: skip
    assert (cfg.sqlite_path, cfg.postgres_db_url, cfg.postgres_pool_max_size) == (
        "/x.db", "postgresql://h/db", 3,
    )  # fmt: skip
    check_storage(cfg)


def test_an_unknown_backend_is_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        _storage("--history-backend", "oracle")
    assert set(HISTORY_BACKENDS) == {"memory", "none", "sqlite", "postgres", "redis"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"history_backend": "postgres"}, "--history-backend postgres needs --postgres-db-url"),
        ({"history_backend": "redis"}, "--history-backend redis needs --redis-url"),
        ({"history_backend": "sqlite"}, "--history-backend sqlite needs --sqlite-path"),
        ({"history_max_records": 0}, "--history-max-records must be >= 1"),
        ({"max_background_responses": -1}, "--max-background-responses must be >= 0"),
        ({"history_max_bytes": 0}, "--history-max-bytes must be >= 1"),
        ({"history_timeout_secs": 0.0}, "--history-timeout-secs must be > 0"),
        ({"redis_retention_days": 0}, "--redis-retention-days must be >= 1"),
        ({"redis_retention_days": -2}, "--redis-retention-days must be >= 1"),
    ],
)
def test_check_storage_refuses(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_storage(dataclasses.replace(StorageConfig(), **changes))  # type: ignore[arg-type]


def test_the_url_never_reaches_the_error() -> None:
    cfg = StorageConfig(
        history_backend="redis", redis_url="", postgres_db_url="postgresql://u:s3cret@h/db"
    )
    with pytest.raises(ConfigError) as caught:
        check_storage(cfg)
    assert "s3cret" not in str(caught.value)
