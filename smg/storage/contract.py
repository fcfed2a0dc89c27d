"""The storage contract: records, pages, errors and the async `Storage` protocol every backend
(memory, none, sqlite, postgres, redis) implements.

Rules every backend keeps (tests/storage/test_contract.py checks them against each one):
- Tenant-scoped everywhere: every call names a `tenant`; a record is keyed by (tenant, id), so one
  tenant never reads, lists, updates or deletes another's records (it sees None/False).
- Not found is a value (None / False), never an exception.
- `StorageError` means the backend failed or could not be reached (or, for `memory`, a record
  larger than its byte bound): the caller turns it into an explicit client error; nothing is
  silently lost. Every call is bounded by the backend's timeout and raises `StorageError` then.
- Items are JSON objects (dicts) with a string `"id"`, unique within their response's input or
  their conversation; the caller assigns ids (it owns randomness). Backends store them as JSON
  bytes and hand back fresh dicts, so a caller mutating what it got changes nothing stored.
- Pages: items keep insertion order; `order="asc"` walks it forwards, `"desc"` backwards; `after`
  is the id of the last item the client saw in that order (an id not in the list gives an empty
  page); `has_more` says whether items remain past the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Item = dict[str, Any]
"""One item (message, function_call, function_call_output, reasoning, mcp_call, ...): a JSON
object with a string `"id"`."""

Order = Literal["asc", "desc"]

MAX_PAGE_LIMIT = 100
"""OpenAI's bound on `limit` for input_items and conversation items."""


class StorageError(Exception):
    """The backend failed or could not be reached (or timed out). The message never holds a
    secret (no URL with a password, no record contents)."""


class ItemConflict(ValueError):
    """An item id is already present in the conversation (the caller's fault, not the
    backend's)."""


@dataclass(frozen=True, slots=True)
class ListQuery:
    """One page request: `after` an item id (exclusive), at most `limit` items, in `order`."""

    after: str | None = None
    limit: int = 20
    order: Order = "desc"

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_PAGE_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_LIMIT}, got {self.limit}")
        if self.order not in ("asc", "desc"):
            raise ValueError(f"order must be 'asc' or 'desc', got {self.order!r}")


@dataclass(frozen=True, slots=True)
class Page:
    items: tuple[Item, ...]
    has_more: bool

    @property
    def first_id(self) -> str | None:
        return self.items[0]["id"] if self.items else None

    @property
    def last_id(self) -> str | None:
        return self.items[-1]["id"] if self.items else None


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response. `put_response` with the same (tenant, id) replaces it (a background
    response moves queued → in_progress → completed/cancelled that way).

    `created_at` is Unix seconds (OpenAI's shape). `body` is the response object as last sent to
    the client, for `GET /v1/responses/{id}` to return as is (fields the record does not hold
    itself: instructions, tools, temperature, ...); it may be empty.
    """

    id: str
    tenant: str
    created_at: int
    status: str
    model: str
    input_items: tuple[Item, ...] = ()
    output_items: tuple[Item, ...] = ()
    previous_response_id: str | None = None
    conversation_id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    usage: Mapping[str, Any] | None = None
    body: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    tenant: str
    created_at: int
    metadata: Mapping[str, str] = field(default_factory=dict)


class Storage(Protocol):
    """Stored responses and conversations. Every method is a coroutine bounded by the backend's
    timeout; see the module docstring for the rules."""

    # ---- responses
    async def put_response(self, record: StoredResponse) -> None:
        """Store (or replace) a response."""
        ...

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None: ...

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """True if it existed."""
        ...

    async def list_input_items(
        self, tenant: str, response_id: str, query: ListQuery
    ) -> Page | None:
        """A page of the response's input items; None if the response is unknown."""
        ...

    # ---- conversations
    async def create_conversation(
        self, conversation: Conversation, items: Sequence[Item] = ()
    ) -> Conversation:
        """Store a new conversation with its initial items (ItemConflict on a repeated id)."""
        ...

    async def get_conversation(self, tenant: str, conversation_id: str) -> Conversation | None: ...

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: Mapping[str, str]
    ) -> Conversation | None:
        """Replace the metadata; None if the conversation is unknown."""
        ...

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """Delete it and its items; True if it existed."""
        ...

    async def add_items(self, tenant: str, conversation_id: str, items: Sequence[Item]) -> bool:
        """Append items in order (all or none; ItemConflict on an id already present or
        repeated); False if the conversation is unknown."""
        ...

    async def list_items(self, tenant: str, conversation_id: str, query: ListQuery) -> Page | None:
        """A page of the conversation's items; None if the conversation is unknown."""
        ...

    async def get_item(self, tenant: str, conversation_id: str, item_id: str) -> Item | None: ...

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool: ...

    # ---- lifecycle
    async def close(self) -> None:
        """Release connections; idempotent."""
        ...


def item_ids(items: Sequence[Item]) -> list[str]:
    """The items' ids, checked: each item is a dict with a non-empty string id, none repeated."""
    ids: list[str] = []
    seen: set[str] = set()
    for item in items:
        item_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(item_id, str) or not item_id:
            raise ValueError("every item must be a JSON object with a non-empty string 'id'")
        if item_id in seen:
            raise ItemConflict(f"item id {item_id!r} is repeated")
        seen.add(item_id)
        ids.append(item_id)
    return ids


def page_window(ids: Sequence[str], query: ListQuery) -> tuple[list[int], bool]:
    """Pure pagination over ids in insertion order: the positions of the page's items and
    whether more remain. Backends that hold the id list (memory, redis) use it directly; the SQL
    backends do the same walk in SQL."""
    n = len(ids)
    if query.order == "asc":
        start = 0
        if query.after is not None:
            try:
                start = ids.index(query.after) + 1
            except ValueError:
                return [], False
        stop = min(n, start + query.limit)
        return list(range(start, stop)), stop < n
    start = n - 1
    if query.after is not None:
        try:
            start = ids.index(query.after) - 1
        except ValueError:
            return [], False
    stop = max(-1, start - query.limit)
    return list(range(start, stop, -1)), stop > -1
