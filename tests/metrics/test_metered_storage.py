"""smg.app.metered_storage: the history storage's calls counted and timed as the Rust gateway's
smg_db_* series (over the real in-memory backend)."""

from __future__ import annotations

import pytest

from smg.app.metered_storage import metered
from smg.core.snapshots import RegistrySnapshot
from smg.metrics import Metrics
from smg.storage.contract import StoredResponse
from smg.storage.memory import MemoryStorage

pytestmark = pytest.mark.unit


async def test_calls_are_counted_by_record_type_operation_and_result() -> None:
    metrics = Metrics(RegistrySnapshot)
    ticks = iter(range(100))
    store = metered(MemoryStorage(), metrics, lambda: float(next(ticks)))
    record = StoredResponse(id="resp_1", tenant="t", created_at=1, status="completed", model="m")
    await store.put_response(record)
    assert (await store.get_response("t", "resp_1")) == record
    assert await store.get_response("t", "resp_nope") is None
    assert await store.delete_response("t", "resp_nope") is False
    reg = metrics.registry

    def ops(**labels: str) -> float | None:
        return reg.get_sample_value("smg_db_operations_total", labels)

    assert ops(storage_type="response", operation="put", result="success") == 1
    assert ops(storage_type="response", operation="get", result="success") == 1
    assert ops(storage_type="response", operation="get", result="not_found") == 1
    assert ops(storage_type="response", operation="delete", result="not_found") == 1
    assert reg.get_sample_value("smg_db_items_stored_total", {"storage_type": "response"}) == 1
    timed = {"storage_type": "response", "operation": "get"}
    assert reg.get_sample_value("smg_db_operation_duration_seconds_count", timed) == 2
    assert reg.get_sample_value("smg_db_operation_duration_seconds_sum", timed) == 2.0
    await store.close()  # not a contract call: passed through
