"""The history storage with the Rust gateway's `smg_db_*` series: every call of the `Storage`
contract counted (`smg_db_operations_total{storage_type, operation, result}`) and timed
(`smg_db_operation_duration_seconds{storage_type, operation}`); records written counted in
`smg_db_items_stored{storage_type}`. `storage_type` is what the call touches (response,
conversation, conversation_item), as in the Rust gateway; the backend is the launch flag's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from smg.metrics import Metrics
from smg.storage.contract import Storage

# the contract's calls -> (storage_type, operation)
OPERATIONS: dict[str, tuple[str, str]] = {
    "put_response": ("response", "put"),
    "get_response": ("response", "get"),
    "delete_response": ("response", "delete"),
    "list_input_items": ("response", "list"),
    "create_conversation": ("conversation", "put"),
    "get_conversation": ("conversation", "get"),
    "update_conversation": ("conversation", "put"),
    "delete_conversation": ("conversation", "delete"),
    "add_items": ("conversation_item", "put"),
    "list_items": ("conversation_item", "list"),
    "get_item": ("conversation_item", "get"),
    "delete_item": ("conversation_item", "delete"),
}


class MeteredStorage:
    def __init__(self, inner: Storage, metrics: Metrics, now: Callable[[], float]) -> None:
        self._inner = inner
        self._now = now
        self._ops = metrics.db_operations
        self._durations = metrics.db_duration
        self._stored = metrics.db_items

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        labels = OPERATIONS.get(name)
        if labels is None:
            return target  # close() and the backends' own extras
        return self._timed(target, *labels)

    def _timed(
        self, call: Callable[..., Awaitable[Any]], kind: str, op: str
    ) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started, result = self._now(), "error"
            try:
                out = await call(*args, **kwargs)
                # None from a get, False from a delete or add_items: nothing there
                missing = out is False or (out is None and op != "put")
                result = "not_found" if missing else "success"
                if result == "success" and op == "put":
                    items = args[2] if kind == "conversation_item" and len(args) > 2 else (1,)
                    self._stored.labels(kind).inc(len(items))
                return out
            finally:
                self._ops.labels(kind, op, result).inc()
                self._durations.labels(kind, op).observe(self._now() - started)

        return timed


def metered(inner: Storage, metrics: Metrics, now: Callable[[], float]) -> Storage:
    return cast(Storage, MeteredStorage(inner, metrics, now))
