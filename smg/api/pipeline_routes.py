"""gRPC mode: the gateway as a full OpenAI server over engines that see only token ids.

The stage list is the same for every endpoint: request → sampling params → chat template →
tokens (cached, off the loop) → route on tokens → engine stream → detokenize + stop strings →
OpenAI shapes. A model whose fleet mixes HTTP and gRPC workers still routes once, on tokens; an
HTTP worker picked that way gets the client's original body, relayed as in HTTP mode.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import structlog
from aiohttp import web

from smg import errors
from smg.api.pd_grpc import GrpcPd
from smg.api.relay import ROUTED_WORKER_HEADER, HttpRelay
from smg.core.snapshots import SnapshotCell, WorkerSnapshot
from smg.pipeline.backends.grpc_pool import EnginePool, EngineStream, is_grpc_url, start_stream
from smg.pipeline.chat_template import TemplateError
from smg.pipeline.engine_types import EngineRequest, SamplingParams
from smg.pipeline.output import OutputShaper, OutputSpec
from smg.pipeline.parser_choice import ParserChoice, tool_choice
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.runner import Attempt, Runner
from smg.pipeline.tokenizer import Tokenizer

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
log = structlog.get_logger("smg.pipeline")


def engine_failure(shaper: OutputShaper, request_id: str | None) -> errors.ApiError:
    """The client's error for an engine that failed mid-answer; what it said goes to the log
    (with the client's request id and the engine's)."""
    log.warning(
        "engine_failed",
        request_id=request_id,
        engine_id=shaper.spec.response_id,
        error=shaper.error,
    )
    return errors.engine_failed()


@dataclass(slots=True)
class Prepared:
    """A request after the CPU stages, ready to route and send."""

    model: str
    tokenizer: Tokenizer
    input_ids: list[int]
    prompt_text: str
    sampling: SamplingParams
    spec: OutputSpec


class PipelineRoutes:
    def __init__(
        self,
        *,
        runner: Runner,
        engines: EnginePool,
        tokenizers: SnapshotCell[dict[str, Tokenizer]],
        relay: HttpRelay,
        request_timeout_s: float,
        parsers: ParserChoice,
        pd: GrpcPd | None = None,
    ) -> None:
        self.parsers = parsers
        self.pd = pd  # PD mode: gRPC-served models answer from a prefill/decode pair
        self.runner = runner
        self.engines = engines
        self.tokenizers = tokenizers
        self.relay = relay
        self.timeout_s = request_timeout_s

    def serves(self, model: str | None) -> bool:
        """True when `model` has a gRPC worker: its requests take the token pipeline."""
        if model is None:
            return False
        return any(is_grpc_url(w.url) for w in self.runner.candidates(model))

    def tokenizer(self, model: str) -> Tokenizer:
        tok = self.tokenizers.value.get(model)
        if tok is None:
            now = self.runner.clock.now()
            if not any(w.routable(now) for w in self.runner.candidates(model)):
                # known but not servable now (e.g. its tokenizer failed verification): answer
                # as HTTP mode does when no worker is routable
                raise errors.no_healthy_worker(model)
            raise errors.ApiError(
                503,
                "tokenizer_unavailable",
                f"The tokenizer for model '{model}' is not loaded yet",
                type="server_error",
            )
        return tok

    # --- preparing -------------------------------------------------------------------------------
    async def prepare_chat(
        self, body: dict[str, Any], model: str, request_id: str, sampling: SamplingParams
    ) -> Prepared:
        tok = self.tokenizer(model)
        if tok.chat_template is None:
            raise errors.invalid_request(f"Model '{model}' has no chat template", param="messages")
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise errors.invalid_type("'chat_template_kwargs' must be an object")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise errors.invalid_type("'tools' must be an array", param="tools")
        choice = tool_choice(body, tools)
        if choice.constraint is not None and sampling.json_schema is None:
            sampling = dataclasses.replace(sampling, json_schema=choice.constraint)
        try:
            prompt = tok.chat_template.render(
                body["messages"],
                tools=tools,
                add_generation_prompt=True,
                chat_template_kwargs=kwargs,
            )
        except TemplateError as exc:
            raise errors.invalid_request(f"Chat template: {exc}", param="messages") from None
        ids = await tok.encode(prompt)
        spec = self._spec(body, sampling, model, request_id, True)
        parser = self.parsers.factory(body, model, prompt, tools, choice, request_id)
        if parser is not None:
            spec = dataclasses.replace(
                spec,
                parser=parser,
                parallel_tool_calls=body.get("parallel_tool_calls") is not False,
            )
        return Prepared(model, tok, ids, prompt, sampling, spec)

    async def prepare_completion(
        self, body: dict[str, Any], model: str, request_id: str, sampling: SamplingParams
    ) -> Prepared:
        tok = self.tokenizer(model)
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            text, ids = prompt, await tok.encode(prompt, add_special_tokens=True)
        elif isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            text, ids = "", list(prompt)
        else:
            raise errors.invalid_request(
                "In gRPC mode 'prompt' must be one string or one list of token ids",
                param="prompt",
            )
        spec = self._spec(body, sampling, model, request_id, False)
        if body.get("echo") is True:
            spec = dataclasses.replace(spec, echo_prompt=text or tok.decode_sync(ids, False))
        return Prepared(model, tok, ids, text, sampling, spec)

    def _spec(
        self,
        body: dict[str, Any],
        sampling: SamplingParams,
        model: str,
        request_id: str,
        chat: bool,
    ) -> OutputSpec:
        options = body.get("stream_options")
        return OutputSpec(
            response_id=request_id,
            model=model,
            created=int(time.time()),
            chat=chat,
            n=sampling.n,
            stop=sampling.stop,
            include_stop=sampling.include_stop_str_in_output,
            skip_special_tokens=sampling.skip_special_tokens,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            logprobs=sampling.logprobs is not None,
            top_logprobs=sampling.logprobs or 0,
        )

    # --- running ---------------------------------------------------------------------------------
    async def run(
        self,
        request: web.Request,
        prepared: Prepared,
        *,
        raw: bytes,
        path: str,
        stream: bool,
        request_id: str,
    ) -> web.StreamResponse:
        if self.pd is not None:
            return await self.pd.run(
                self,
                request,
                prepared,
                self._route(request, prepared),
                self._engine_request(prepared, stream),
            )
        attempt = await self.open(request, prepared, raw=raw, path=path, stream=stream)
        if isinstance(attempt.response, aiohttp.ClientResponse):
            return await self.relay.answer(request, attempt, request_id, stream)
        shaper = OutputShaper(prepared.spec, prepared.tokenizer.decode_sync)
        if stream:
            return await self._stream(request, attempt, shaper, request_id)
        return await self._whole(attempt, shaper, request_id)

    async def open(
        self,
        request: web.Request,
        prepared: Prepared,
        *,
        raw: bytes,
        path: str,
        stream: bool,
    ) -> Attempt[Any]:
        """Route on the prompt's tokens and start the call: an `EngineStream` for a gRPC worker,
        an HTTP response (to the client's body, `raw`, engine ids already the gateway's) for an
        HTTP one. Both carry the gateway's engine id, never the client's."""
        engine_id = prepared.spec.response_id
        engine_request = self._engine_request(prepared, stream)
        route = self._route(request, prepared)
        engines, backend = self.engines, self.relay.backend
        headers = request.headers

        def send(worker: WorkerSnapshot, timeout_s: float) -> Awaitable[Any]:
            if is_grpc_url(worker.url):
                return start_stream(engines.client(worker.url), engine_request, timeout_s)
            fwd = backend.forward_headers(headers, worker, engine_id)
            return backend.open(worker, path, raw, fwd, timeout_s)

        return await self.runner.open(
            model=prepared.model, route=route, send=send, request_id=request["request_id"]
        )

    @staticmethod
    def _engine_request(prepared: Prepared, stream: bool) -> EngineRequest:
        return EngineRequest(
            request_id=prepared.spec.response_id,
            input_ids=tuple(prepared.input_ids),
            sampling=prepared.sampling,
            stream=stream,
            original_text=prepared.prompt_text,
        )

    @staticmethod
    def _route(request: web.Request, prepared: Prepared) -> RouteRequest:
        return RouteRequest(
            tokens=prepared.input_ids,
            routing_key=request.headers.get(ROUTING_KEY_HEADER),
            model=prepared.model,
        )

    async def _whole(
        self, attempt: Attempt[EngineStream], shaper: OutputShaper, request_id: str
    ) -> web.Response:
        headers = {"X-Request-Id": request_id, ROUTED_WORKER_HEADER: attempt.worker.worker_id}
        return await self.whole(
            attempt.response, shaper, headers, lambda ok: self.runner.finish(attempt, ok)
        )

    async def _stream(
        self,
        request: web.Request,
        attempt: Attempt[EngineStream],
        shaper: OutputShaper,
        request_id: str,
    ) -> web.StreamResponse:
        headers = {"X-Request-Id": request_id, ROUTED_WORKER_HEADER: attempt.worker.worker_id}
        resp = web.StreamResponse(status=200, headers={**SSE_HEADERS, **headers})
        await self.stream(
            request, resp, attempt.response, shaper, lambda ok: self.runner.finish(attempt, ok)
        )
        return resp

    @staticmethod
    async def whole(
        engine: EngineStream,
        shaper: OutputShaper,
        headers: dict[str, str],
        finish: Callable[[bool | None], None],
    ) -> web.Response:
        """Collect one engine call into one OpenAI body; `finish(success)` reports the outcome
        (None: unknown, the client left)."""
        success: bool | None = None  # stays None if the client leaves first
        try:
            async for ev in engine.events():
                shaper.collect(ev)
                if shaper.all_done:
                    break
            success = shaper.error is None
            if shaper.error is not None and not any(c.text for c in shaper.choices):
                raise engine_failure(shaper, headers.get("X-Request-Id"))
            return web.Response(
                body=orjson.dumps(shaper.body()), content_type="application/json", headers=headers
            )
        finally:
            await engine.aclose()
            finish(success)

    @staticmethod
    async def stream(
        request: web.Request,
        resp: web.StreamResponse,
        engine: EngineStream,
        shaper: OutputShaper,
        finish: Callable[[bool | None], None],
    ) -> None:
        """Relay one engine call as OpenAI SSE frames on `resp` (prepared here); `finish`
        reports the engine's outcome (None when the client left first: cancelled, or a write
        found it gone)."""
        success: bool | None = None  # stays None if the client leaves first
        try:
            write = resp.write
            on_event = shaper.on_event
            # One write per batch of engine events that arrived together (never waiting for
            # more); the frames of the last batch go out with the closing frames and the end
            # of the chunked body, in one write.
            last: list[bytes] = []
            try:
                await resp.prepare(request)
                async for batch in engine.batches():
                    if len(batch) == 1:
                        frames = on_event(batch[0])
                    else:
                        frames = []
                        for ev in batch:
                            frames += on_event(ev)
                            if shaper.all_done:
                                break
                    if shaper.all_done:
                        last = frames
                        break
                    if frames:
                        await write(frames[0] if len(frames) == 1 else b"".join(frames))
                success = shaper.error is None
                if shaper.error is not None:
                    err = engine_failure(shaper, resp.headers.get("X-Request-Id"))
                    last.append(b"data: " + err.to_json() + b"\n\n")
                last += shaper.closing_frames()
                await resp.write_eof(b"".join(last))
            except ConnectionError:  # the client left: nothing more to send
                return
        finally:
            await engine.aclose()
            finish(success)
