"""`--history-backend memory` (the default): one process's dict, bounded, gone on restart.

The limit: at most `max_records` responses + conversations (a conversation's items count as part
of it, not as records) and at most `max_bytes` of their JSON encoding in total. Storing past
either bound evicts the least recently used records (a get, an update or an added item counts as a
use) until the new one fits; a single record larger than `max_bytes` on its own is refused with
`StorageError` rather than stored and lost at once. Records are kept as JSON bytes, so the byte
count is exact and a caller mutating what it got changes nothing stored.

The Rust gateway's bounds, checked on every write: at most `max_responses` stored responses (the
oldest stored go first; a background response still queued or running is skipped), at most
`max_items` conversation items in all (the oldest added go first, out of their conversation),
and with `retention_s` > 0 a response is dropped that long after it was stored, a conversation
that long after its last use (created, read, updated or added to). `now` is the injected clock.

No awaits inside an operation: each one is atomic on the event loop, so no lock is needed.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from smg.storage import codec
from smg.storage.contract import (
    Conversation,
    Item,
    ItemConflict,
    ListQuery,
    Page,
    StorageError,
    StoredResponse,
    item_ids,
    page_window,
)

DEFAULT_MAX_RECORDS = 10_000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_RESPONSES = 10_000  # the Rust gateway's --history-memory-* defaults
DEFAULT_MAX_ITEMS = 100_000
DEFAULT_RETENTION_S = 86_400.0
RUNNING = frozenset({"queued", "in_progress"})  # never dropped by the response count


@dataclass(slots=True)
class _Response:
    data: bytes
    input_ids: list[str]

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(slots=True)
class _Conversation:
    data: bytes
    items: dict[str, bytes] = field(default_factory=dict)  # insertion order is the item order
    size: int = 0


_Key = tuple[str, str, str]  # (kind, tenant, id)


class MemoryStorage:
    __slots__ = (
        "_bytes",
        "_conversations_used",
        "_entries",
        "_items",
        "_now",
        "_responses_stored",
        "_running",
        "max_bytes",
        "max_items",
        "max_records",
        "max_responses",
        "retention_s",
    )

    def __init__(
        self,
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_responses: int = DEFAULT_MAX_RESPONSES,
        max_items: int = DEFAULT_MAX_ITEMS,
        retention_s: float = 0.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(max_records, max_bytes, max_responses, max_items) < 1 or retention_s < 0:
            raise ValueError("the memory backend's bounds must be positive (retention: >= 0)")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_responses = max_responses
        self.max_items = max_items
        self.retention_s = retention_s
        self._now = now
        self._entries: OrderedDict[_Key, _Response | _Conversation] = OrderedDict()
        self._bytes = 0
        # the orders the Rust gateway's bounds drop by: responses as stored, conversations as
        # last used (with the time), every conversation item as added
        self._responses_stored: OrderedDict[_Key, float] = OrderedDict()
        self._running: set[_Key] = set()
        self._conversations_used: OrderedDict[_Key, float] = OrderedDict()
        self._items: OrderedDict[tuple[_Key, str], None] = OrderedDict()

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    # ---- bookkeeping
    def _touch(self, key: _Key) -> _Response | _Conversation | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def _remove(self, key: _Key) -> bool:
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        self._bytes -= entry.size
        self._responses_stored.pop(key, None)
        self._running.discard(key)
        self._conversations_used.pop(key, None)
        if isinstance(entry, _Conversation):
            for item_id in entry.items:
                self._items.pop((key, item_id), None)
        return True

    def _used(self, key: _Key) -> None:
        self._conversations_used[key] = self._now()
        self._conversations_used.move_to_end(key)

    def _enforce(self) -> None:
        """The Rust gateway's bounds, on every write: retention by age, then the counts."""
        if self.retention_s > 0:
            cutoff = self._now() - self.retention_s
            for order in (self._responses_stored, self._conversations_used):
                while order and next(iter(order.values())) <= cutoff:
                    self._remove(next(iter(order)))
        while len(self._responses_stored) > self.max_responses:
            oldest = next((k for k in self._responses_stored if k not in self._running), None)
            if oldest is None:
                break  # every response left is still running
            self._remove(oldest)
        while len(self._items) > self.max_items:
            key, item_id = next(iter(self._items))
            entry = self._entries.get(key)
            if isinstance(entry, _Conversation):
                self._drop_item(key, entry, item_id)
            else:
                del self._items[(key, item_id)]

    def _drop_item(self, key: _Key, entry: _Conversation, item_id: str) -> None:
        size = len(entry.items.pop(item_id))
        self._items.pop((key, item_id), None)
        entry.size -= size
        self._bytes -= size

    def _check_fits(self, size: int) -> None:
        if size > self.max_bytes:
            raise StorageError(
                f"record of {size} bytes exceeds the memory backend's bound of "
                f"{self.max_bytes} bytes"
            )

    def _make_room(self, grow: int, keep: _Key | None, new_record: bool) -> None:
        """Evict least recently used records (never `keep`) until `grow` more bytes and, if
        `new_record`, one more record fit. The caller has checked the record fits alone."""
        while self._entries and (
            self._bytes + grow > self.max_bytes
            or (new_record and len(self._entries) >= self.max_records)
        ):
            oldest = next(iter(self._entries))
            if oldest == keep:
                if len(self._entries) == 1:
                    break
                self._entries.move_to_end(oldest)
                continue
            self._remove(oldest)

    def _conversation(self, tenant: str, conversation_id: str) -> _Conversation | None:
        """The conversation, marked used (any read or write of it counts)."""
        key = ("c", tenant, conversation_id)
        entry = self._touch(key)
        if not isinstance(entry, _Conversation):
            return None
        self._used(key)
        return entry

    # ---- responses
    async def put_response(self, record: StoredResponse) -> None:
        ids = item_ids(record.input_items)
        data = codec.dump_response(record)
        self._check_fits(len(data))
        key = ("r", record.tenant, record.id)
        self._remove(key)
        self._make_room(len(data), None, True)
        self._entries[key] = _Response(data, ids)
        self._bytes += len(data)
        self._responses_stored[key] = self._now()
        if record.status in RUNNING:
            self._running.add(key)
        self._enforce()

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        entry = self._touch(("r", tenant, response_id))
        return codec.load_response(entry.data) if isinstance(entry, _Response) else None

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        return self._remove(("r", tenant, response_id))

    async def list_input_items(
        self, tenant: str, response_id: str, query: ListQuery
    ) -> Page | None:
        entry = self._touch(("r", tenant, response_id))
        if not isinstance(entry, _Response):
            return None
        positions, has_more = page_window(entry.input_ids, query)
        items = codec.load_response(entry.data).input_items
        return Page(tuple(items[i] for i in positions), has_more)

    # ---- conversations
    async def create_conversation(
        self, conversation: Conversation, items: Sequence[Item] = ()
    ) -> Conversation:
        ids = item_ids(items)
        data = codec.dump_conversation(conversation)
        encoded = {i: codec.dump(item) for i, item in zip(ids, items, strict=True)}
        size = len(data) + sum(len(b) for b in encoded.values())
        self._check_fits(size)
        key = ("c", conversation.tenant, conversation.id)
        self._remove(key)
        self._make_room(size, None, True)
        self._entries[key] = _Conversation(data, encoded, size)
        self._bytes += size
        self._used(key)
        self._items.update(((key, i), None) for i in encoded)
        self._enforce()
        return conversation

    async def get_conversation(self, tenant: str, conversation_id: str) -> Conversation | None:
        entry = self._conversation(tenant, conversation_id)
        return None if entry is None else codec.load_conversation(entry.data)

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: Mapping[str, str]
    ) -> Conversation | None:
        entry = self._conversation(tenant, conversation_id)
        if entry is None:
            return None
        updated = replace(codec.load_conversation(entry.data), metadata=dict(metadata))
        data = codec.dump_conversation(updated)
        grow = len(data) - len(entry.data)
        if grow > 0:
            self._check_fits(entry.size + grow)
            self._make_room(grow, ("c", tenant, conversation_id), False)
        entry.data = data
        entry.size += grow
        self._bytes += grow
        self._enforce()
        return updated

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        return self._remove(("c", tenant, conversation_id))

    async def add_items(self, tenant: str, conversation_id: str, items: Sequence[Item]) -> bool:
        ids = item_ids(items)
        entry = self._conversation(tenant, conversation_id)
        if entry is None:
            return False
        for item_id in ids:
            if item_id in entry.items:
                raise ItemConflict(f"item id {item_id!r} is already in the conversation")
        encoded = [codec.dump(item) for item in items]
        grow = sum(len(b) for b in encoded)
        self._check_fits(entry.size + grow)
        self._make_room(grow, ("c", tenant, conversation_id), False)
        entry.items.update(zip(ids, encoded, strict=True))
        entry.size += grow
        self._bytes += grow
        key = ("c", tenant, conversation_id)
        self._items.update(((key, i), None) for i in ids)
        self._enforce()
        return True

    async def list_items(self, tenant: str, conversation_id: str, query: ListQuery) -> Page | None:
        entry = self._conversation(tenant, conversation_id)
        if entry is None:
            return None
        ids = list(entry.items)
        positions, has_more = page_window(ids, query)
        return Page(tuple(codec.load_item(entry.items[ids[i]]) for i in positions), has_more)

    async def get_item(self, tenant: str, conversation_id: str, item_id: str) -> Item | None:
        entry = self._conversation(tenant, conversation_id)
        if entry is None or item_id not in entry.items:
            return None
        return codec.load_item(entry.items[item_id])

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        entry = self._conversation(tenant, conversation_id)
        if entry is None or item_id not in entry.items:
            return False
        self._drop_item(("c", tenant, conversation_id), entry, item_id)
        return True

    async def close(self) -> None:
        return None
