"""OpenAI Responses endpoints on the one request flow, with stored responses.

`POST /v1/responses`: the edge reads the body, checks it into a `ResponsesRequest`
(smg.pipeline.responses_request: unknown fields and what smg does not do yet get a 400 naming
the field), rebuilds a `previous_response_id` chain from storage, maps the request to the chat
body token mode prepares (chat template, tool and reasoning parsers) and runs it through
`Flow.serve` with the Responses renderer (smg.pipeline.responses_output), which shapes the
engine's events as output items: a whole `response` object, or the typed event stream.

Storage (`store`, default true): the finished response (its input and output items, the response
object as sent) is stored under the caller's tenant; with `conversation` its input and output
items are appended to that conversation (whose items are the history the model sees first).
A whole answer is stored before it is sent: when storage fails the client gets 503
`response_store_failed` instead of an answer it could not chain from. A stream has sent its
`response.completed` by then: a failure to store it is logged (`response_store_failed`, with the
request id and the response id) and the response is simply not found later.
`store: false` stores nothing, so such a response cannot be chained.

`GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`
(`after`, `limit`, `order`) read storage only.

HTTP mode: the same chat body goes to an HTTP worker's /v1/chat/completions and its answer is
read back and rendered as the same items and events (smg.flow.chat).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from smg.api import requests as rq
from smg.api.responses_loop import ToolLoop
from smg.api.stored import json_response, list_query, new_id, page_response, stored, tenant_of
from smg.errors import ApiError
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.pipeline.responses_items import stored_items, unsupported
from smg.pipeline.responses_object import response_object
from smg.pipeline.responses_output import ResponsesRenderer
from smg.pipeline.responses_request import (
    ResponsesRequest,
    chat_body,
    parse_responses,
    with_history,
)
from smg.pipeline.sampling import sampling_from_openai
from smg.storage import (
    MAX_PAGE_LIMIT,
    ItemConflict,
    ListQuery,
    Storage,
    StorageError,
    StoredResponse,
)

MAX_CONVERSATION_ITEMS = 10_000  # items a conversation's history is read back with, at most
MAX_CHAIN = 256  # responses a previous_response_id chain may go back (a bound on the rebuild)
log = structlog.get_logger("smg.api")


class ResponsesRoutes:
    def __init__(
        self,
        *,
        flow: Flow,
        storage: Storage,
        max_payload: int,
        tools: ToolLoop | None = None,
        make_id: Callable[[str], str] = new_id,
    ) -> None:
        self.flow = flow
        self.storage = storage
        self.tools = tools  # the MCP tool loop (None: MCP tools are refused)
        # responses being generated here: (tenant, id) -> (their handler's task, renderer);
        # bounded by the admission queue (one entry per admitted request)
        self.running: dict[tuple[str, str], tuple[asyncio.Task[Any], ResponsesRenderer]] = {}
        self.max_payload = max_payload
        self.make_id = make_id

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)
        app.router.add_get("/v1/responses/{id}", self.get)
        app.router.add_delete("/v1/responses/{id}", self.delete)
        app.router.add_post("/v1/responses/{id}/cancel", self.cancel)
        app.router.add_get("/v1/responses/{id}/input_items", self.input_items)

    async def create(self, request: web.Request) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        parsed = parse_responses(body)
        sampling = sampling_from_openai(chat_body(parsed), chat=True)  # ranges, response_format
        self.flow.resolve_model(parsed.model)  # an unknown model: 404 before storage is read
        if parsed.mcp:
            if self.tools is None:
                raise unsupported("tools", "MCP tools are not served by this gateway")
            self.tools.check(parsed)
        tenant = tenant_of(request)
        history: list[dict[str, Any]] = []
        if parsed.previous_response_id is not None:
            history = await self._chain(tenant, parsed.previous_response_id)
            parsed = with_history(parsed, history)
        elif parsed.conversation is not None:
            history = await self._conversation(tenant, parsed.conversation)
            parsed = with_history(parsed, history)
        response_id = self.make_id("resp_")
        render = ResponsesRenderer(parsed, response_id)
        rounds = 0

        async def serve_round(this: ResponsesRequest) -> web.StreamResponse:
            nonlocal rounds
            chat = chat_body(this)
            req = rq.flow_request(
                request,
                Kind.CHAT,
                "/v1/chat/completions",
                orjson.dumps(chat),
                chat,
                parsed.model,
                sampling,
                "resp_",
            )
            if rounds:  # a tool loop's later round: a request of its own for the engine
                req = req._replace(engine_id=f"{req.engine_id}-{rounds}")
            rounds += 1
            return await self.flow.serve(req, render, request)

        task = asyncio.current_task()
        assert task is not None
        key = (tenant, response_id)
        self.running[key] = (task, render)
        try:
            if self.tools is not None and parsed.mcp:
                answer = await self.tools.answer(parsed, history, render, serve_round)
            else:
                answer = await serve_round(parsed)
        finally:
            self.running.pop(key, None)
        final = render.made.final if render.made is not None else {}
        if final and (parsed.store or parsed.conversation is not None):
            said = {item["id"] for item in history}  # an item said again gets a new id
            new_id = self.make_id
            items = [
                {**i, "id": new_id("item_")} if i["id"] in said else i
                for i in stored_items(parsed.input, new_id)
            ]
            try:
                if parsed.store:
                    await self._store(tenant, parsed, items, final)
                if parsed.conversation is not None:
                    await self._append(tenant, parsed.conversation, [*items, *final["output"]])
            except (StorageError, ItemConflict) as exc:
                log.error(
                    "response_store_failed",
                    request_id=request.get("request_id"),
                    response_id=final["id"],
                    error=str(exc),
                )
                if not parsed.stream:
                    raise _store_failed() from None
        return answer

    async def _conversation(self, tenant: str, conversation_id: str) -> list[dict[str, Any]]:
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

    async def _append(self, tenant: str, conversation_id: str, items: list[dict[str, Any]]) -> None:
        if not await self.storage.add_items(tenant, conversation_id, items):
            raise StorageError(f"conversation {conversation_id} was deleted meanwhile")

    async def _chain(self, tenant: str, response_id: str) -> list[dict[str, Any]]:
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

    async def _store(
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

    # --- stored responses ------------------------------------------------------------------------
    async def cancel(self, request: web.Request) -> web.StreamResponse:
        """Cancel a response being generated: its request ends (the engine call is aborted, as
        when a client leaves; its own client's connection is closed) and the response as it
        stood, status `cancelled`, is stored (with `store`) and returned. A finished response
        cannot be cancelled (400, as the Rust gateway answers)."""
        tenant, response_id = tenant_of(request), request.match_info["id"]
        running = self.running.pop((tenant, response_id), None)
        if running is not None:
            task, render = running
            task.cancel()
            if render.made is not None:
                body = render.made.cancelled()
            else:  # not prepared yet: nothing said
                now = int(time.time())
                body = response_object(render.req, response_id, now, "cancelled", [], None)
            if render.req.store:
                items = stored_items(render.req.input, self.make_id)
                await stored(self._store(tenant, render.req, items, body))
            return json_response(body)
        record = await self._found(request)
        status = record.status
        if status == "cancelled":
            return json_response(dict(record.body))
        raise ApiError(
            400,
            f"response_already_{status}",
            f"Cannot cancel {status} response",
            param="response_id",
        )

    async def get(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("stream") not in (None, "false"):
            raise ApiError(
                400,
                "unsupported_parameter",
                "Unsupported parameter: 'stream': replaying a stored response is not supported yet",
                param="stream",
            )
        record = await self._found(request)
        return json_response(dict(record.body))

    async def delete(self, request: web.Request) -> web.StreamResponse:
        response_id = request.match_info["id"]
        if not await stored(self.storage.delete_response(tenant_of(request), response_id)):
            raise _not_found(response_id)
        return json_response({"id": response_id, "object": "response", "deleted": True})

    async def input_items(self, request: web.Request) -> web.StreamResponse:
        response_id = request.match_info["id"]
        query = list_query(request.query)
        page = await stored(self.storage.list_input_items(tenant_of(request), response_id, query))
        if page is None:
            raise _not_found(response_id)
        return page_response(page)

    async def _found(self, request: web.Request) -> StoredResponse:
        response_id = request.match_info["id"]
        record = await stored(self.storage.get_response(tenant_of(request), response_id))
        if record is None:
            raise _not_found(response_id)
        return record


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, "response_not_found", f"Response with id '{response_id}' not found")


def _store_failed() -> ApiError:
    return ApiError(
        503,
        "response_store_failed",
        "The response was generated but could not be stored (store: true); nothing was kept. "
        "Retry, or send store: false",
        type="server_error",
    )
