"""What the stored-state edges (Responses, Conversations) share: the caller's tenant, storage
calls whose failure is an explicit 503, and list pages in OpenAI's shape."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import orjson
from aiohttp import web

from smg import errors
from smg.errors import ApiError
from smg.storage import MAX_PAGE_LIMIT, ListQuery, Page, StorageError

NO_TENANT = ""  # the tenant of callers the auth gate gave none (no authentication configured)
T = TypeVar("T")


def new_id(prefix: str) -> str:
    """A fresh id for a response, item or conversation (`resp_…`, `msg_…`, `conv_…`)."""
    return f"{prefix}{os.urandom(24).hex()}"


def tenant_of(request: web.Request) -> str:
    principal = request.get("principal")
    tenant = getattr(principal, "tenant", None)
    return tenant if isinstance(tenant, str) else NO_TENANT


async def stored(op: Awaitable[T]) -> T:
    """A storage call; a failed or unreachable backend is a 503 (what failed goes to the log
    by the backend, never to the client)."""
    try:
        return await op
    except StorageError:
        raise ApiError(
            503,
            "storage_unavailable",
            "The response and conversation store is unavailable; try again later",
            type="server_error",
        ) from None


def list_query(query: Mapping[str, str], *, default_limit: int = 20) -> ListQuery:
    """`after`, `limit` (1-100) and `order` (asc|desc, default desc) of a list request."""
    try:
        limit = int(query.get("limit", default_limit))
    except ValueError:
        raise errors.invalid_type("'limit' must be an integer", param="limit") from None
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise errors.invalid_value(f"'limit' must be between 1 and {MAX_PAGE_LIMIT}", param="limit")
    order = query.get("order", "desc")
    if order == "asc":
        return ListQuery(after=query.get("after"), limit=limit, order="asc")
    if order == "desc":
        return ListQuery(after=query.get("after"), limit=limit, order="desc")
    raise errors.invalid_value("'order' must be 'asc' or 'desc'", param="order")


def page_response(page: Page) -> web.Response:
    return json_response(
        {
            "object": "list",
            "data": list(page.items),
            "first_id": page.first_id,
            "last_id": page.last_id,
            "has_more": page.has_more,
        }
    )


def json_response(value: Any) -> web.Response:
    return web.Response(body=orjson.dumps(value), content_type="application/json")
