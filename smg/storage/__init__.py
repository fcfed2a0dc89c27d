"""Stored responses and conversations (`--history-backend`).

`contract` holds the records, pages, errors and the `Storage` protocol; each backend is one
module (`memory`, `none`, later `sqlite`, `postgres`, `redis`) implementing it. A low layer: it
imports only config, errors, clock and core.
"""

from smg.storage.contract import (
    MAX_PAGE_LIMIT,
    Conversation,
    Item,
    ItemConflict,
    ListQuery,
    Order,
    Page,
    Storage,
    StorageError,
    StoredResponse,
)

__all__ = [
    "MAX_PAGE_LIMIT",
    "Conversation",
    "Item",
    "ItemConflict",
    "ListQuery",
    "Order",
    "Page",
    "Storage",
    "StorageError",
    "StoredResponse",
]
