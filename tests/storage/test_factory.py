"""open_storage (smg/storage/factory.py): each --history-backend gives its backend, checked
first."""

from __future__ import annotations

from pathlib import Path

import pytest

from smg.config import ConfigError, StorageConfig
from smg.storage.factory import open_storage
from smg.storage.memory import MemoryStorage
from smg.storage.none import NoneStorage
from smg.storage.sqlite import SqliteStorage


async def test_memory_none_and_sqlite(tmp_path: Path) -> None:
    memory = await open_storage(StorageConfig(history_max_records=7, history_max_bytes=99))
    assert isinstance(memory, MemoryStorage)
    assert (memory.max_records, memory.max_bytes) == (7, 99)
    assert isinstance(await open_storage(StorageConfig(history_backend="none")), NoneStorage)
    path = tmp_path / "h.db"
    sqlite = await open_storage(StorageConfig(history_backend="sqlite", sqlite_path=str(path)))
    try:
        assert isinstance(sqlite, SqliteStorage) and path.exists()
    finally:
        await sqlite.close()


async def test_a_config_that_cannot_be_served_is_refused_before_connecting() -> None:
    with pytest.raises(ConfigError, match="needs --postgres-db-url"):
        await open_storage(StorageConfig(history_backend="postgres"))


@pytest.mark.integration
async def test_postgres_and_redis(postgres_url: str, redis_url: str) -> None:
    for cfg in (
        StorageConfig(history_backend="postgres", postgres_db_url=postgres_url),
        StorageConfig(history_backend="redis", redis_url=redis_url, redis_retention_days=-1),
    ):
        store = await open_storage(cfg)
        try:
            assert await store.get_response("t", "nope") is None
        finally:
            await store.close()
