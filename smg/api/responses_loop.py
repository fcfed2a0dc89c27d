"""The MCP tool loop of `POST /v1/responses`: the gateway runs the model's MCP tool calls and
feeds their outputs back, round after round, inside one response.

A request whose `tools` name MCP servers (smg.pipeline.responses_mcp) is answered here:

1. each server is opened (a `--mcp-config-path` server by label, or the request's `server_url`
   for this request only: its address passes the workers' address policy) and its tools listed
   (the pool caches lists): one `mcp_list_tools` item per server; a server that cannot be
   listed says so in its item and offers nothing;
2. a call the client approved (`mcp_approval_response` for an `mcp_approval_request` of the
   chain) is run first, as an `mcp_call` item;
3. round after round, the model is offered the client's function tools and the servers' tools
   (the client's `tool_choice` for the first round, `auto` after); the round runs through the one
   request flow (`Flow.serve`) with the Responses renderer carrying the response across rounds
   (`Rounds`: items, event sequence, usage). A round that ends in MCP calls pauses: its calls run
   at once, in parallel (a tool's error, a deadline, a server gone: an output the model sees),
   and the next round sees them; a round that ends otherwise, or that also asks the client for
   something (a function call, an approval), ends the response. Past `--mcp-max-iterations`
   rounds with calls, or past `max_tool_calls` calls, the response fails
   (`tool_iterations_exceeded`, `max_tool_calls_exceeded`).

A stream is one SSE body (`RoundStream`): each round's flow writes its events to it and "ends"
it; only the loop ends it for real. A whole answer is the last round's response object.
Metrics: `smg_mcp_tool_calls_total{server,tool,outcome}`, `smg_mcp_tool_call_duration_seconds`,
`smg_mcp_loop_iterations_total`; each call logs `mcp_tool_call` (server, tool, outcome, ms:
never arguments, outputs or headers).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
import structlog
from aiohttp import web

from smg import errors
from smg.errors import ApiError
from smg.flow.render import SSE_HEADERS
from smg.mcp_client.outputs import UNAVAILABLE, McpTool, ToolOutput, failure_output
from smg.mcp_client.pool import McpPool, McpServer, McpUnavailable, UrlGuard
from smg.mcp_client.server_url import InvalidServerUrl
from smg.metrics import Metrics
from smg.pipeline.responses_items import input_messages
from smg.pipeline.responses_mcp import (
    McpServerSpec,
    approval_responses,
    call_result,
    list_tools_item,
    offer,
)
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_request import ResponsesRequest
from smg.pipeline.responses_rounds import Rounds, RoundShaper

DEFAULT_MAX_CALLS = 128  # MCP calls per response without max_tool_calls
log = structlog.get_logger("smg.api")

# one round through the flow: (the request for this round) -> the flow's answer
ServeRound = Callable[[ResponsesRequest], Awaitable[web.StreamResponse]]


class RoundStream(web.StreamResponse):
    """The one SSE body of a streamed response across its model rounds: a round's flow prepares
    it (once) and "ends" it with its last frames; only `end` sends the end of the body."""

    def __init__(self) -> None:
        super().__init__(status=200, headers=SSE_HEADERS)
        self._ending = False

    def open(self, headers: dict[str, str]) -> RoundStream:
        if not self.prepared:
            self.headers.update(headers)
        return self

    async def write_eof(self, data: bytes = b"") -> None:
        if self._ending:
            await super().write_eof(data)
        elif data:
            await self.write(data)

    async def end(self, data: bytes = b"") -> None:
        self._ending = True
        if self.prepared:
            await self.write_eof(data)


class _Server:
    """One server of the request, as the loop uses it (configured, or the request's own; None:
    its session could not be opened, `down` says why)."""

    def __init__(
        self, spec: McpServerSpec, server: McpServer | None, model: str, down: str = ""
    ) -> None:
        self.spec = spec
        self.model = model  # the request's model (a metric label once the registry knows it)
        self.server = server
        self.down = down
        self.metric_name = spec.label if spec.url is None else "request"
        self.tools: tuple[McpTool, ...] = ()  # as listed for this request

    async def list_tools(self) -> tuple[McpTool, ...]:
        if self.server is None:
            raise McpUnavailable(self.down)
        return await self.server.list_tools()

    async def call_tool(self, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        if self.server is None:
            return failure_output(self.spec.label, tool, UNAVAILABLE)
        return await self.server.call_tool(tool, arguments)


class ToolLoop:
    def __init__(
        self,
        *,
        pool: McpPool,
        metrics: Metrics | None,
        max_iterations: int,
        guard: UrlGuard | None = None,
    ) -> None:
        self.pool = pool
        self.guard = guard  # the workers' address policy, for servers given by URL
        self.metrics = metrics
        self.max_iterations = max_iterations

    def check(self, parsed: ResponsesRequest) -> None:
        """A 400 for MCP tools the gateway cannot serve (before anything runs)."""
        known = set(self.pool.servers)
        for i, spec in enumerate(parsed.mcp):
            where = f"tools[{i}]"
            if spec.url is None and spec.label not in known:
                raise ApiError(
                    400,
                    "mcp_server_not_found",
                    f"{where}.server_label: no MCP server {spec.label!r} is configured in this "
                    "gateway (and no server_url was given)",
                    type="invalid_request_error",
                    param=f"{where}.server_label",
                )

    async def answer(
        self,
        parsed: ResponsesRequest,
        history: Sequence[dict[str, Any]],
        render: ResponsesRenderer,
        serve_round: ServeRound,
    ) -> web.StreamResponse:
        """The response to `parsed` (its `history` already in its messages), round by round."""
        async with self._servers(parsed) as servers:
            base = render.response_id.removeprefix("resp_")
            items = await self._listed(parsed, servers, base)
            items += await self._approved(parsed, history, servers, base, len(items))
            listed = {s.spec.label: s.tools for s in servers.values()}
            given = offer(parsed.mcp, listed, (t["name"] for t in parsed.tools))
            max_calls = parsed.echo.get("max_tool_calls", DEFAULT_MAX_CALLS)
            rounds = Rounds(given, max_calls, self.max_iterations, items, unannounced=len(items))
            render.loop = rounds.shaper
            stream = RoundStream() if parsed.stream else None
            if stream is not None:
                rounds.open_stream = stream.open
            offered = tuple({"type": "function", **f["function"]} for f in given.functions)
            earlier = [*history, *_as_items(parsed.input)]
            messages = input_messages([*earlier, *items], parsed.instructions)  # approved calls
            request = dataclasses.replace(
                parsed, tools=(*parsed.tools, *offered), messages=messages
            )
            try:
                return await self._rounds(
                    request, earlier, rounds, render, serve_round, servers, stream
                )
            finally:
                if stream is not None:
                    with contextlib.suppress(ConnectionError):
                        await stream.end()

    async def _rounds(
        self,
        request: ResponsesRequest,
        earlier: list[dict[str, Any]],
        rounds: Rounds,
        render: ResponsesRenderer,
        serve_round: ServeRound,
        servers: Mapping[str, _Server],
        stream: RoundStream | None,
    ) -> web.StreamResponse:
        streaming = stream is not None
        answer: web.StreamResponse | None = None
        while True:
            try:
                answer = await serve_round(request)
            except ApiError as err:
                shaper = _round(render)
                if shaper is None or not shaper.paused:
                    raise  # nothing said yet: the client gets the error itself
                await _write(stream, shaper.fail(err, streaming))
                break
            shaper = _round(render)
            assert shaper is not None
            if not shaper.paused:
                break
            outputs = await self._run_calls(shaper, servers)
            await _write(stream, shaper.tool_results(outputs, streaming))
            rounds.calls += len(outputs)
            rounds.iterations += 1
            if self.metrics is not None:
                self.metrics.mcp_round(request.model)
            if shaper.calls_for_client:
                await _write(stream, shaper.conclude(streaming))
                break
            shaper.carry()
            messages = input_messages([*earlier, *rounds.items], request.instructions)
            request = dataclasses.replace(request, messages=messages, tool_choice="auto")
        if stream is not None:
            return stream
        shaper = _round(render)
        assert shaper is not None and answer is not None
        headers = {k: v for k, v in answer.headers.items() if k.lower().startswith("x-")}
        return web.Response(
            body=orjson.dumps(shaper.final), content_type="application/json", headers=headers
        )

    # --- servers ----------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _servers(self, parsed: ResponsesRequest) -> AsyncIterator[dict[str, _Server]]:
        """The request's servers, open for as long as its response runs: a configured one from
        the pool, one given by `server_url` for this request only (its address checked by the
        workers' address policy: a refused or malformed URL is a 400)."""
        async with contextlib.AsyncExitStack() as stack:
            servers: dict[str, _Server] = {}
            for i, spec in enumerate(parsed.mcp):
                if spec.url is None:
                    servers[spec.label] = _Server(spec, self.pool.server(spec.label), parsed.model)
                    continue
                opening = self.pool.request_server(
                    spec.label, spec.url, dict(spec.headers), guard=self.guard
                )
                try:
                    server = await stack.enter_async_context(opening)
                except InvalidServerUrl as exc:
                    raise errors.invalid_value(str(exc), param=f"tools[{i}].server_url") from None
                except McpUnavailable as exc:
                    log.warning("mcp_server_unavailable", server=spec.label, error=str(exc))
                    servers[spec.label] = _Server(spec, None, parsed.model, str(exc))
                    continue
                servers[spec.label] = _Server(spec, server, parsed.model)
            yield servers

    async def _listed(
        self, parsed: ResponsesRequest, servers: Mapping[str, _Server], base: str
    ) -> list[dict[str, Any]]:
        """One `mcp_list_tools` item per server (listed at once, in parallel)."""

        async def listing(server: _Server) -> tuple[tuple[McpTool, ...] | None, str | None]:
            try:
                return await server.list_tools(), None
            except McpUnavailable as exc:
                log.warning("mcp_list_tools_failed", server=server.spec.label, error=str(exc))
                return None, str(exc)

        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(listing(servers[s.label])) for s in parsed.mcp]
        items = []
        for k, (spec, task) in enumerate(zip(parsed.mcp, tasks, strict=True)):
            tools, error = task.result()
            servers[spec.label].tools = tools or ()
            items.append(list_tools_item(f"mcpl_{base}{k:02x}", spec, tools, error))
        return items

    async def _approved(
        self,
        parsed: ResponsesRequest,
        history: Sequence[dict[str, Any]],
        servers: Mapping[str, _Server],
        base: str,
        first: int,
    ) -> list[dict[str, Any]]:
        """`mcp_call` items for the calls the client approved in this request's input."""
        answers = approval_responses(parsed.input)
        if not answers:
            return []
        asked = {i["id"]: i for i in history if i.get("type") == "mcp_approval_request"}
        items: list[dict[str, Any]] = []
        for request_id, approve in answers.items():
            ask = asked.get(request_id)
            if ask is None:
                raise errors.invalid_value(
                    f"mcp_approval_response: no mcp_approval_request {request_id!r} in the "
                    "previous responses",
                    param="input",
                )
            server = servers.get(ask["server_label"])
            if server is None:
                raise errors.invalid_value(
                    f"mcp_approval_response: the MCP server {ask['server_label']!r} of "
                    f"{request_id!r} is not in this request's tools",
                    param="tools",
                )
            if not approve:
                continue
            item = {
                "id": f"mcp_{base}{first + len(items):02x}",
                "type": "mcp_call",
                "server_label": ask["server_label"],
                "name": ask["name"],
                "arguments": ask["arguments"],
                "approval_request_id": request_id,
            }
            call_result(item, *await self._call(server, ask["name"], ask["arguments"]))
            items.append(item)
        return items

    # --- calls ------------------------------------------------------------------------------------
    async def _run_calls(
        self, shaper: RoundShaper, servers: Mapping[str, _Server]
    ) -> list[tuple[str, str | None]]:
        """The outputs (text, error code or None) of the paused round's MCP calls, run at once."""
        calls = [shaper.items[i] for i in shaper.pending]
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(self._call(servers[c["server_label"]], c["name"], c["arguments"]))
                for c in calls
            ]
        return [t.result() for t in tasks]

    async def _call(self, server: _Server, tool: str, arguments: str) -> tuple[str, str | None]:
        try:
            args = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            self._count(server, tool, "bad_arguments", 0.0)
            return f"the arguments of tool {tool!r} are not a JSON object; it was not called", (
                "bad_arguments"
            )
        started = time.monotonic()
        out = await server.call_tool(tool, args)
        self._count(server, tool, out.error or "ok", time.monotonic() - started)
        return out.text, out.error

    def _count(self, server: _Server, tool: str, outcome: str, seconds: float) -> None:
        name = server.metric_name
        log.info(
            "mcp_tool_call", server=server.spec.label, tool=tool, outcome=outcome,
            ms=round(seconds * 1000, 1),
        )  # fmt: skip
        if self.metrics is not None:
            shown = tool if server.spec.url is None else "any"
            self.metrics.mcp_call(server.model, name, shown, outcome, seconds)


def _round(render: ResponsesRenderer) -> RoundShaper | None:
    """The renderer of the round that ran last (None: no round has begun)."""
    shaper = render.made
    assert shaper is None or isinstance(shaper, RoundShaper)
    return shaper


def _as_items(raw: str | list[Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw)


async def _write(stream: RoundStream | None, frames: list[bytes]) -> None:
    if stream is not None and frames and stream.prepared:
        await stream.write(b"".join(frames))
