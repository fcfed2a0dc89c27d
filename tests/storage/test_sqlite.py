"""The sqlite backend's failure paths (smg/storage/sqlite.py); the contract itself runs in
test_contract.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from smg.storage.contract import StorageError
from smg.storage.sqlite import SqliteStorage


async def test_an_unopenable_path_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="sqlite open failed"):
        await SqliteStorage.open(str(tmp_path / "missing" / "dir" / "h.db"))


async def test_calls_after_close_fail_cleanly(tmp_path: Path) -> None:
    store = await SqliteStorage.open(str(tmp_path / "h.db"))
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StorageError):
        await store.get_response("t", "r")


async def test_not_a_database_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StorageError):
        await SqliteStorage.open(str(path))
