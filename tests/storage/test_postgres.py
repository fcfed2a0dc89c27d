"""The postgres backend's failure paths (smg/storage/postgres.py): an unreachable or silent server
gives StorageError within the timeout (never a hang), the URL's password never shows, and a schema
newer than the code is refused. The contract itself runs in test_contract.py."""

from __future__ import annotations

import time

import asyncpg
import pytest

from smg.storage.contract import StorageError
from smg.storage.postgres import PostgresStorage
from smg.storage.sql import SCHEMA_VERSION

from .servers import blackhole, free_port

pytestmark = pytest.mark.integration


async def test_a_refused_connection_is_a_storage_error_without_the_password() -> None:
    url = f"postgresql://smg:s3cret@127.0.0.1:{free_port()}/db"
    with pytest.raises(StorageError) as caught:
        await PostgresStorage.open(url, timeout_s=2.0)
    assert "s3cret" not in str(caught.value) and "postgres connect failed" in str(caught.value)


async def test_a_silent_server_times_out() -> None:
    with blackhole() as port:
        started = time.monotonic()
        with pytest.raises(StorageError):
            await PostgresStorage.open(f"postgresql://u:s3cret@127.0.0.1:{port}/db", timeout_s=0.3)
        assert time.monotonic() - started < 3.0


async def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute("CREATE DATABASE newer")
    finally:
        await admin.close()
    url = postgres_url.rsplit("/", 1)[0] + "/newer"
    store = await PostgresStorage.open(url)
    await store.close()
    conn = await asyncpg.connect(url)
    try:
        version = await conn.fetchval("SELECT version FROM smg_schema_version")
        assert version == SCHEMA_VERSION
        await conn.execute("UPDATE smg_schema_version SET version = $1", SCHEMA_VERSION + 1)
    finally:
        await conn.close()
    with pytest.raises(StorageError, match="newer than this smg"):
        await PostgresStorage.open(url)


async def test_calls_after_the_server_is_gone_fail_cleanly(postgres_url: str) -> None:
    store = await PostgresStorage.open(postgres_url, timeout_s=1.0)
    await store.close()
    with pytest.raises(StorageError):
        await store.get_response("t", "r")
