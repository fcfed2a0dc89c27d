"""`--history-backend memory` (the default): one process's dict, bounded, gone on restart.

The limit: at most `max_records` responses + conversations (a conversation's items count as part
of it, not as records) and at most `max_bytes` of their JSON encoding in total. Storing past
either bound evicts the least recently used records (a get, an update or an added item counts as a
use) until the new one fits; a single record larger than `max_bytes` on its own is refused with
`StorageError` rather than stored and lost at once. Records are kept as JSON bytes, so the byte
count is exact and a caller mutating what it got changes nothing stored.

No awaits inside an operation: each one is atomic on the event loop, so no lock is needed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
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
    __slots__ = ("_bytes", "_entries", "max_bytes", "max_records")

    def __init__(
        self, *, max_records: int = DEFAULT_MAX_RECORDS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if max_records < 1 or max_bytes < 1:
            raise ValueError("max_records and max_bytes must be positive")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._entries: OrderedDict[_Key, _Response | _Conversation] = OrderedDict()
        self._bytes = 0

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
        return True

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
        entry = self._touch(("c", tenant, conversation_id))
        return entry if isinstance(entry, _Conversation) else None

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
        size = len(entry.items.pop(item_id))
        entry.size -= size
        self._bytes -= size
        return True

    async def close(self) -> None:
        return None
