"""`--history-backend none`: stores nothing. Reads find nothing (None / False), writes succeed and
are dropped (the caller chose that; `store=false` semantics for everything)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from smg.storage.contract import Conversation, Item, ListQuery, Page, StoredResponse, item_ids


class NoneStorage:
    __slots__ = ()

    async def put_response(self, record: StoredResponse) -> None:
        item_ids(record.input_items)

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        return None

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        return False

    async def list_input_items(
        self, tenant: str, response_id: str, query: ListQuery
    ) -> Page | None:
        return None

    async def create_conversation(
        self, conversation: Conversation, items: Sequence[Item] = ()
    ) -> Conversation:
        item_ids(items)
        return conversation

    async def get_conversation(self, tenant: str, conversation_id: str) -> Conversation | None:
        return None

    async def update_conversation(
        self, tenant: str, conversation_id: str, metadata: Mapping[str, str]
    ) -> Conversation | None:
        return None

    async def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        return False

    async def add_items(self, tenant: str, conversation_id: str, items: Sequence[Item]) -> bool:
        item_ids(items)
        return False

    async def list_items(self, tenant: str, conversation_id: str, query: ListQuery) -> Page | None:
        return None

    async def get_item(self, tenant: str, conversation_id: str, item_id: str) -> Item | None:
        return None

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        return False

    async def close(self) -> None:
        return None
