"""The backend `StorageConfig` names, opened (connected and migrated). The composition root calls
`open_storage` at start and `close()` at stop; a failure here is a StorageError to report."""

from __future__ import annotations

from smg.config import StorageConfig, check_storage
from smg.storage.contract import Storage
from smg.storage.memory import MemoryStorage
from smg.storage.none import NoneStorage


async def open_storage(cfg: StorageConfig) -> Storage:
    check_storage(cfg)
    timeout_s = cfg.history_timeout_secs
    match cfg.history_backend:
        case "memory":
            return MemoryStorage(
                max_records=cfg.history_max_records,
                max_bytes=cfg.history_max_bytes,
                max_responses=cfg.history_memory_max_responses,
                max_items=cfg.history_memory_max_items,
                retention_s=cfg.history_memory_retention_secs,
            )
        case "none":
            return NoneStorage()
        case "sqlite":
            from smg.storage.sqlite import SqliteStorage

            assert cfg.sqlite_path is not None
            return await SqliteStorage.open(cfg.sqlite_path, timeout_s=timeout_s)
        case "postgres":
            from smg.storage.postgres import PostgresStorage

            assert cfg.postgres_db_url is not None
            return await PostgresStorage.open(
                cfg.postgres_db_url, timeout_s=timeout_s, pool_max_size=cfg.postgres_pool_max_size
            )
        case "redis":
            from smg.storage.redis import RedisStorage

            assert cfg.redis_url is not None
            return await RedisStorage.open(
                cfg.redis_url, retention_days=cfg.redis_retention_days, timeout_s=timeout_s,
                pool_max_size=cfg.redis_pool_max_size,
            )  # fmt: skip
    raise AssertionError(cfg.history_backend)  # check_storage refused it
