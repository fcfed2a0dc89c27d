"""OpenAI Responses endpoints on the one request flow, with stored responses.

`POST /v1/responses`: the edge reads the body, checks it into a `ResponsesRequest`
(smg.pipeline.responses_request: unknown fields and what smg does not do yet get a 400 naming
the field), rebuilds a `previous_response_id` chain from storage, maps the request to the chat
body token mode prepares (chat template, tool and reasoning parsers) and runs it through
`Flow.serve` with the Responses renderer (smg.pipeline.responses_output), which shapes the
engine's events as output items: a whole `response` object, or the typed event stream.

Storage (`store`, default true; smg.api.responses_history): the finished response (its input
and output items, the response object as sent) is stored under the caller's tenant; with
`conversation` its input and output items are appended to that conversation (whose items are
the history the model sees first).
A whole answer is stored before it is sent: when storage fails the client gets 503
`response_store_failed` instead of an answer it could not chain from. A stream has sent its
`response.completed` by then: a failure to store it is logged (`response_store_failed`, with the
request id and the response id) and the response is simply not found later.
`store: false` stores nothing, so such a response cannot be chained.

`GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`
(`after`, `limit`, `order`) read storage only.

Background (`"background": true`, which needs `store`): the response is stored as `queued` and
answered at once (or, with `stream`, its events are sent as they come; leaving does not stop it);
it runs in the gateway's task group (smg.api.responses_background; at most
`--max-background-responses` at once, else 429 `too_many_background_responses`), through the
same flow and admission, stored `in_progress` then as it ended. MCP tools are not run in the
background yet (400). `POST .../cancel` of a running one aborts its engine work and stores and
returns it `cancelled`.

Replay, `GET /v1/responses/{id}?stream=true` (`starting_after`: only later sequence numbers):
a background response running here is followed live from its bounded event log; any other is
re-derived from the stored response object (smg.pipeline.responses_replay: one delta per item).

HTTP mode: the same chat body goes to an HTTP worker's /v1/chat/completions and its answer is
read back and rendered as the same items and events (smg.flow.chat).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from smg.api import requests as rq
from smg.api.responses_background import Background, Job, sse
from smg.api.responses_history import ResponseHistory
from smg.api.responses_loop import ToolLoop
from smg.api.stored import json_response, list_query, new_id, page_response, stored, tenant_of
from smg.errors import ApiError
from smg.flow.request import Kind, Request
from smg.flow.serve import Flow
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.responses_items import stored_items, unsupported
from smg.pipeline.responses_object import failure, response_object
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_replay import after, frame, replay_events
from smg.pipeline.responses_request import (
    ResponsesRequest,
    chat_body,
    parse_responses,
    with_history,
)
from smg.pipeline.sampling import sampling_from_openai
from smg.storage import (
    ItemConflict,
    Storage,
    StorageError,
    StoredResponse,
)

CANCEL_WAIT_S = 10.0  # a cancelled background response's task, waited for before storing
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
        background: Background | None = None,
    ) -> None:
        self.flow = flow
        self.storage = storage
        self.history = ResponseHistory(storage)  # chains, conversations, storing
        # background responses (smg.api.responses_background); None: refused
        self.background = background
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
            history = await self.history.chain(tenant, parsed.previous_response_id)
            parsed = with_history(parsed, history)
        elif parsed.conversation is not None:
            history = await self.history.conversation(tenant, parsed.conversation)
            parsed = with_history(parsed, history)
        if parsed.background and self.background is None:  # background mode off: run it now
            parsed = dataclasses.replace(parsed, background=False)
        if parsed.background:
            return await self._start_background(request, tenant, parsed, history, sampling)
        response_id = self.make_id("resp_")
        render = ResponsesRenderer(parsed, response_id)
        rounds = 0

        async def serve_round(this: ResponsesRequest) -> web.StreamResponse:
            nonlocal rounds
            req = _flow_request(request, this, sampling)
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
            try:
                await self.history.keep(tenant, parsed, self._input_items(parsed, history), final)
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

    def _input_items(
        self, parsed: ResponsesRequest, history: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The request's input as stored items (an item said again gets a new id)."""
        said = {item["id"] for item in history}
        new_id = self.make_id
        return [
            {**i, "id": new_id("item_")} if i["id"] in said else i
            for i in stored_items(parsed.input, new_id)
        ]

    # --- background responses --------------------------------------------------------------------
    async def _start_background(
        self,
        request: web.Request,
        tenant: str,
        parsed: ResponsesRequest,
        history: list[dict[str, Any]],
        sampling: SamplingParams | None,
    ) -> web.StreamResponse:
        """Store the response as `queued` and run it in the gateway's task group: the answer is
        the queued response object, or (`stream`) its events as they come."""
        assert self.background is not None
        if parsed.mcp:
            raise unsupported("background", "background responses with MCP tools")
        self.background.check()
        response_id = self.make_id("resp_")
        key = (tenant, response_id)
        items = self._input_items(parsed, history)
        queued = response_object(parsed, response_id, int(time.time()), "queued", [], None)
        await stored(self.history.store(tenant, parsed, items, queued))
        live = dataclasses.replace(parsed, stream=True)  # its frames go to the job's event log
        req = _flow_request(request, live, sampling)

        async def run(job: Job) -> None:
            await self.history.store(tenant, parsed, items, {**queued, "status": "in_progress"})
            try:
                await self.flow.serve(req, job.render, request)
                final = _final(job)
            except asyncio.CancelledError:
                if not job.cancelled:  # the gateway stops: what it had is kept as cancelled
                    with contextlib.suppress(StorageError, TimeoutError):
                        stopped = self.history.store(tenant, parsed, items, _cancelled(job))
                        await asyncio.wait_for(stopped, CANCEL_WAIT_S)
                raise
            except ApiError as err:
                made = job.render.made
                final = (
                    made.response("failed", err)
                    if made is not None
                    else response_object(
                        parsed, response_id, queued["created_at"], "failed", [], None,
                        error=failure(err),
                    )
                )  # fmt: skip
            try:
                await self.history.keep(tenant, parsed, items, final)
            except (StorageError, ItemConflict) as exc:
                log.error("response_store_failed", response_id=response_id, error=str(exc))

        job = self.background.start(key, ResponsesRenderer(live, response_id), run)
        job.items = items
        if not parsed.stream:
            return json_response(queued)
        return await sse(request, job.events.follow(-1))

    async def _cancel_background(self, tenant: str, job: Job) -> dict[str, Any]:
        """End a running background response: its engine work is aborted, the response as it
        stood is stored as `cancelled` and returned."""
        job.cancelled = True
        if job.task is not None:
            job.task.cancel()
            await asyncio.wait({job.task}, timeout=CANCEL_WAIT_S)
        body = _cancelled(job)
        await stored(self.history.store(tenant, job.render.req, job.items, body))
        return body

    # --- stored responses ------------------------------------------------------------------------
    async def cancel(self, request: web.Request) -> web.StreamResponse:
        """Cancel a response being generated: its request ends (the engine call is aborted, as
        when a client leaves; its own client's connection is closed) and the response as it
        stood, status `cancelled`, is stored (with `store`) and returned. A finished response
        cannot be cancelled (400, as the Rust gateway answers)."""
        tenant, response_id = tenant_of(request), request.match_info["id"]
        job = self.background.jobs.get((tenant, response_id)) if self.background else None
        if job is not None:
            return json_response(await self._cancel_background(tenant, job))
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
                await stored(self.history.store(tenant, render.req, items, body))
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
            return await self._replay(request)
        record = await self._found(request)
        return json_response(dict(record.body))

    async def _replay(self, request: web.Request) -> web.StreamResponse:
        """The response's events: followed live while it runs in the background here, else
        re-derived from the stored response (smg.pipeline.responses_replay)."""
        starting_after = _starting_after(request.query.get("starting_after"))
        key = (tenant_of(request), request.match_info["id"])
        job = self.background.jobs.get(key) if self.background else None
        if job is not None:
            start = -1 if starting_after is None else starting_after
            job.events.check(start)
            return await sse(request, job.events.follow(start))
        record = await self._found(request)
        events = after(replay_events(record.body), starting_after)
        return await sse(request, [frame(e) for e in events])

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


def _flow_request(
    request: web.Request, this: ResponsesRequest, sampling: SamplingParams | None
) -> Request:
    chat = chat_body(this)
    return rq.flow_request(
        request,
        Kind.CHAT,
        "/v1/chat/completions",
        orjson.dumps(chat),
        chat,
        this.model,
        sampling,
        "resp_",
    )


def _final(job: Job) -> dict[str, Any]:
    """The terminal response object of a background run that returned."""
    made = job.render.made
    if made is None:
        raise ApiError(502, "engine_failed", "The engine gave no answer")
    if made.final:
        return made.final
    return made.response("failed", None)  # the engine failed mid-stream


def _cancelled(job: Job) -> dict[str, Any]:
    """A background response as it stands, cancelled."""
    render = job.render
    if render.made is not None:
        return render.made.cancelled()
    now = int(time.time())  # not prepared yet: nothing said
    return response_object(render.req, render.response_id, now, "cancelled", [], None)


def _starting_after(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -2
    if value < -1:
        raise ApiError(
            400,
            "invalid_value",
            "'starting_after' must be a sequence_number (an integer, -1 or more)",
            param="starting_after",
        )
    return value


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
