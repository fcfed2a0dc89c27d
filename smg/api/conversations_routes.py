"""OpenAI Conversations endpoints: conversations and their items in storage, per tenant.

    POST   /v1/conversations                         create (optional `items`, `metadata`)
    GET    /v1/conversations/{id}                    the conversation object
    POST   /v1/conversations/{id}                    replace its `metadata`
    DELETE /v1/conversations/{id}                    delete it and its items
    POST   /v1/conversations/{id}/items              append `items` (at most 20 per call)
    GET    /v1/conversations/{id}/items              a page (`after`, `limit`, `order`)
    GET    /v1/conversations/{id}/items/{item_id}    one item
    DELETE /v1/conversations/{id}/items/{item_id}    delete it; answers the conversation

Items are checked as Responses input items are (smg.pipeline.responses_items) and stored in
OpenAI's listed shape with ids. A response created with `conversation` reads its items as
history and appends its own (smg.api.responses_routes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from smg import errors
from smg.api import requests as rq
from smg.api.stored import json_response, list_query, new_id, page_response, stored, tenant_of
from smg.errors import ApiError
from smg.pipeline.responses_items import input_messages, stored_items
from smg.pipeline.responses_request import check_metadata
from smg.storage import Conversation, ItemConflict, Page, Storage

MAX_ITEMS_PER_REQUEST = 20  # OpenAI's (and the Rust gateway's) bound on items per call


class ConversationsRoutes:
    def __init__(
        self,
        *,
        storage: Storage,
        max_payload: int,
        make_id: Callable[[str], str] = new_id,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.max_payload = max_payload
        self.make_id = make_id
        self.now = now

    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/v1/conversations", self.create)
        r.add_get("/v1/conversations/{id}", self.get)
        r.add_post("/v1/conversations/{id}", self.update)
        r.add_delete("/v1/conversations/{id}", self.delete)
        r.add_post("/v1/conversations/{id}/items", self.add_items)
        r.add_get("/v1/conversations/{id}/items", self.list_items)
        r.add_get("/v1/conversations/{id}/items/{item_id}", self.get_item)
        r.add_delete("/v1/conversations/{id}/items/{item_id}", self.delete_item)

    async def _body(self, request: web.Request, allowed: frozenset[str]) -> dict[str, Any]:
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        for name in body:
            if name not in allowed:
                raise ApiError(
                    400, "unknown_parameter", f"Unknown parameter: '{name}'.", param=name
                )
        return body

    def _items(self, raw: Any, *, required: bool) -> list[dict[str, Any]]:
        if raw is None and not required:
            return []
        if raw is None:
            raise errors.missing_field("items")
        if not isinstance(raw, list):
            raise errors.invalid_type("'items' must be an array", param="items")
        if len(raw) > MAX_ITEMS_PER_REQUEST:
            raise errors.invalid_value(
                f"'items' holds {len(raw)} items; at most {MAX_ITEMS_PER_REQUEST} per request",
                param="items",
            )
        if raw:
            input_messages(raw, None)  # the same checks as a response's input items
        return stored_items(raw, self.make_id)

    async def create(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request, frozenset({"items", "metadata"}))
        items = self._items(body.get("items"), required=False)
        conversation = Conversation(
            id=self.make_id("conv_"),
            tenant=tenant_of(request),
            created_at=int(self.now()),
            metadata=check_metadata(body.get("metadata")),
        )
        try:
            made = await stored(self.storage.create_conversation(conversation, items))
        except ItemConflict as exc:
            raise errors.invalid_value(str(exc), param="items") from None
        return json_response(_conversation(made))

    async def get(self, request: web.Request) -> web.StreamResponse:
        return json_response(_conversation(await self._found(request)))

    async def update(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request, frozenset({"metadata"}))
        if "metadata" not in body:
            raise errors.missing_field("metadata")
        metadata = check_metadata(body["metadata"])
        conv_id = request.match_info["id"]
        got = await stored(self.storage.update_conversation(tenant_of(request), conv_id, metadata))
        if got is None:
            raise _not_found(conv_id)
        return json_response(_conversation(got))

    async def delete(self, request: web.Request) -> web.StreamResponse:
        conv_id = request.match_info["id"]
        if not await stored(self.storage.delete_conversation(tenant_of(request), conv_id)):
            raise _not_found(conv_id)
        return json_response({"id": conv_id, "object": "conversation.deleted", "deleted": True})

    async def add_items(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request, frozenset({"items"}))
        items = self._items(body.get("items"), required=True)
        conv_id = request.match_info["id"]
        try:
            added = await stored(self.storage.add_items(tenant_of(request), conv_id, items))
        except ItemConflict as exc:
            raise errors.invalid_value(str(exc), param="items") from None
        if not added:
            raise _not_found(conv_id)
        return page_response(Page(tuple(items), has_more=False))

    async def list_items(self, request: web.Request) -> web.StreamResponse:
        conv_id = request.match_info["id"]
        query = list_query(request.query)
        page = await stored(self.storage.list_items(tenant_of(request), conv_id, query))
        if page is None:
            raise _not_found(conv_id)
        return page_response(page)

    async def get_item(self, request: web.Request) -> web.StreamResponse:
        conv = await self._found(request)
        item_id = request.match_info["item_id"]
        item = await stored(self.storage.get_item(conv.tenant, conv.id, item_id))
        if item is None:
            raise _item_not_found(item_id)
        return json_response(item)

    async def delete_item(self, request: web.Request) -> web.StreamResponse:
        conv = await self._found(request)
        item_id = request.match_info["item_id"]
        if not await stored(self.storage.delete_item(conv.tenant, conv.id, item_id)):
            raise _item_not_found(item_id)
        return json_response(_conversation(conv))

    async def _found(self, request: web.Request) -> Conversation:
        conv_id = request.match_info["id"]
        conv = await stored(self.storage.get_conversation(tenant_of(request), conv_id))
        if conv is None:
            raise _not_found(conv_id)
        return conv


def _conversation(conv: Conversation) -> dict[str, Any]:
    return {
        "id": conv.id,
        "object": "conversation",
        "created_at": conv.created_at,
        "metadata": dict(conv.metadata),
    }


def _not_found(conv_id: str) -> ApiError:
    return ApiError(404, "conversation_not_found", f"Conversation with id '{conv_id}' not found")


def _item_not_found(item_id: str) -> ApiError:
    return ApiError(404, "item_not_found", f"Item with id '{item_id}' not found")
