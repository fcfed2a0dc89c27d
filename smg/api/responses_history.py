"""The stored side of the Responses API: what a request reads before it runs and keeps after.

`ResponseHistory` rebuilds a `previous_response_id` chain (at most `MAX_CHAIN` responses back:
a missing link is 400 `previous_response_not_found`, naming it), reads a conversation's items
(at most `MAX_CONVERSATION_ITEMS`; an unknown one is 404 `conversation_not_found`), and stores a
finished response and appends its items to its conversation. Every storage call has the
backend's deadline; a failure is a `StorageError` for the caller to map (503 before an answer,
a log line after a stream).
"""

from __future__ import annotations

from typing import Any

from smg.api.stored import stored
from smg.errors import ApiError
from smg.pipeline.responses_request import ResponsesRequest
from smg.storage import MAX_PAGE_LIMIT, ListQuery, Storage, StorageError, StoredResponse

MAX_CONVERSATION_ITEMS = 10_000  # items a conversation's history is read back with, at most
MAX_CHAIN = 256  # responses a previous_response_id chain may go back (a bound on the rebuild)


class ResponseHistory:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def keep(
        self,
        tenant: str,
        parsed: ResponsesRequest,
        items: list[dict[str, Any]],
        final: dict[str, Any],
    ) -> None:
        """Store the finished response (with `store`) and append it to its conversation."""
        if parsed.store:
            await self.store(tenant, parsed, items, final)
        if parsed.conversation is not None:
            await self.append(tenant, parsed.conversation, [*items, *final["output"]])

    async def conversation(self, tenant: str, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's items, oldest first (at most MAX_CONVERSATION_ITEMS)."""
        if await stored(self.storage.get_conversation(tenant, conversation_id)) is None:
            raise ApiError(
                404,
                "conversation_not_found",
                f"Conversation '{conversation_id}' not found. Please create the conversation "
                "first using the conversations API.",
                param="conversation",
            )
        items: list[dict[str, Any]] = []
        after: str | None = None
        while len(items) < MAX_CONVERSATION_ITEMS:
            query = ListQuery(after=after, limit=MAX_PAGE_LIMIT, order="asc")
            page = await stored(self.storage.list_items(tenant, conversation_id, query))
            if page is None:  # deleted meanwhile
                break
            items += page.items
            if not page.has_more:
                break
            after = page.last_id
        return items

    async def append(self, tenant: str, conversation_id: str, items: list[dict[str, Any]]) -> None:
        if not await self.storage.add_items(tenant, conversation_id, items):
            raise StorageError(f"conversation {conversation_id} was deleted meanwhile")

    async def chain(self, tenant: str, response_id: str) -> list[dict[str, Any]]:
        """The stored items of a chain ending at `response_id`, oldest first."""
        records: list[StoredResponse] = []
        next_id: str | None = response_id
        while next_id is not None and len(records) < MAX_CHAIN:
            record = await stored(self.storage.get_response(tenant, next_id))
            if record is None:
                raise ApiError(  # (an earlier link may have been deleted: named as well)
                    400,
                    "previous_response_not_found",
                    f"Previous response with id '{next_id}' not found.",
                    param="previous_response_id",
                )
            records.append(record)
            next_id = record.previous_response_id
        items: list[dict[str, Any]] = []
        for record in reversed(records):
            items += record.input_items
            items += record.output_items
        return items

    async def store(
        self,
        tenant: str,
        parsed: ResponsesRequest,
        input_items: list[dict[str, Any]],
        final: dict[str, Any],
    ) -> None:
        record = StoredResponse(
            id=final["id"],
            tenant=tenant,
            created_at=final["created_at"],
            status=final["status"],
            model=parsed.model,
            input_items=tuple(input_items),
            output_items=tuple(final["output"]),
            previous_response_id=parsed.previous_response_id,
            conversation_id=parsed.conversation,
            metadata=parsed.metadata,
            usage=final["usage"],
            body=final,
        )
        await self.storage.put_response(record)
