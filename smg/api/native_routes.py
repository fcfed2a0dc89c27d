"""Native endpoints: SGLang's `/generate`, and `/v1/tokenize`, `/v1/detokenize` (vLLM's shapes).

In gRPC mode `/generate` runs the same token pipeline as the OpenAI routes (one `ChoiceState`
per choice: incremental detokenizer and stop matcher); for a model served only by HTTP workers
it is relayed to the worker, as SGLang servers answer it themselves.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from smg import errors
from smg.api import requests as rq
from smg.api.openai_routes import OpenAIRoutes
from smg.flow.admission import Admission
from smg.flow.inflight import InFlight
from smg.flow.relay import ROUTED_WORKER_HEADER
from smg.flow.runner import Attempt
from smg.flow.tokens import SSE_HEADERS, PipelineRoutes, Prepared
from smg.pipeline.backends.grpc_pool import EngineStream
from smg.pipeline.engine_ids import engine_body
from smg.pipeline.engine_types import Finished, TokenDelta
from smg.pipeline.output import ChoiceState, OutputSpec
from smg.pipeline.parsers import REASONING_PARSERS, TOOL_PARSERS, reasoning_parser, tool_parser
from smg.pipeline.sampling import sampling_from_openai
from smg.pipeline.tokenizer import Tokenizer

# SGLang's sampling_params names -> the OpenAI names the validator knows
_SGLANG_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}
_PASSTHROUGH = (
    "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "n", "seed",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
    "skip_special_tokens", "logit_bias",
)  # fmt: skip


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


class NativeRoutes:
    def __init__(
        self,
        *,
        openai: OpenAIRoutes,
        pipeline: PipelineRoutes,
        admission: Admission,
        inflight: InFlight,
        max_payload: int,
    ) -> None:
        self.openai = openai
        self.pipeline = pipeline
        self.admission = admission
        self.inflight = inflight
        self.max_payload = max_payload

    def install(self, app: web.Application) -> None:
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/v1/tokenize", self.tokenize)
        app.router.add_post("/v1/detokenize", self.detokenize)
        app.router.add_post("/parse/function_call", self.parse_function_call)
        app.router.add_post("/parse/reasoning", self.parse_reasoning)

    async def parse_function_call(self, request: web.Request) -> web.Response:
        """`{text, tool_call_parser, tools}` -> `{remaining_text, tool_calls, success}`."""
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        text, name = body.get("text"), body.get("tool_call_parser")
        if not isinstance(text, str):
            raise errors.missing_field("text")
        if not isinstance(name, str) or name not in TOOL_PARSERS:
            raise errors.invalid_value(
                f"Unknown tool_call_parser {name!r}; known: {', '.join(sorted(TOOL_PARSERS))}",
                param="tool_call_parser",
            )
        tools = body.get("tools")
        result = tool_parser(name, tools if isinstance(tools, list) else None).parse(text)
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in result.calls
        ]
        return _json({"remaining_text": result.normal_text, "tool_calls": calls, "success": True})

    async def parse_reasoning(self, request: web.Request) -> web.Response:
        """`{text, reasoning_parser}` -> `{normal_text, reasoning_text, success}`."""
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        text, name = body.get("text"), body.get("reasoning_parser")
        if not isinstance(text, str):
            raise errors.missing_field("text")
        if not isinstance(name, str) or name not in REASONING_PARSERS:
            raise errors.invalid_value(
                f"Unknown reasoning_parser {name!r}; known: {', '.join(sorted(REASONING_PARSERS))}",
                param="reasoning_parser",
            )
        result = reasoning_parser(name).parse(text)
        return _json(
            {
                "normal_text": result.normal_text,
                "reasoning_text": result.reasoning_text,
                "success": True,
            }
        )

    def _model(self, body: dict[str, Any]) -> str:
        model = body.get("model")
        if isinstance(model, str) and model:
            self.pipeline.runner.candidates(model)  # 404 for an unknown model
            return model
        served = list(self.pipeline.runner.registry.value.by_model)
        if len(served) == 1:
            return served[0]
        if not served:
            raise errors.no_healthy_worker()
        raise errors.missing_field("model")

    def _tokenizer(self, model: str) -> Tokenizer:
        tok = self.pipeline.tokenizers.value.get(model)
        if tok is None:
            raise errors.invalid_request(
                f"Model '{model}' has no tokenizer in the gateway (HTTP workers only?)",
                param="model",
                code="tokenizer_not_available",
            )
        return tok

    async def tokenize(self, request: web.Request) -> web.Response:
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        model = self._model(body)
        tok = self._tokenizer(model)
        if "messages" in body:
            rq.check_chat({"messages": body["messages"]})
            if tok.chat_template is None:
                raise errors.invalid_request("The model has no chat template", param="messages")
            add_prompt = body.get("add_generation_prompt", True) is not False
            text = tok.chat_template.render(body["messages"], add_generation_prompt=add_prompt)
            ids = await tok.encode(text)
        elif isinstance(body.get("prompt"), str):
            ids = await tok.encode(
                body["prompt"], add_special_tokens=body.get("add_special_tokens", True) is not False
            )
        else:
            raise errors.missing_field("prompt")
        return _json({"count": len(ids), "max_model_len": None, "tokens": ids})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        model = self._model(body)
        tok = self._tokenizer(model)
        tokens = body.get("tokens")
        if tokens is None:
            raise errors.missing_field("tokens")
        if not isinstance(tokens, list) or not all(
            type(t) is int and 0 <= t < tok.vocab_size for t in tokens
        ):
            raise errors.invalid_type("'tokens' must be a list of token ids", param="tokens")
        return _json({"prompt": await tok.decode(tokens, skip_special_tokens=False)})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        model = self._model(body)
        if not self.pipeline.serves(model):
            return await self.openai.relay_native(request, "/generate", raw, body, model)
        request_id: str = request["request_id"]
        engine_id = rq.engine_request_id(request, "req-")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise errors.invalid_type(
                "'sampling_params' must be an object", param="sampling_params"
            )
        openai_like: dict[str, Any] = {k: params[k] for k in _PASSTHROUGH if k in params}
        for native, name in _SGLANG_NAMES.items():
            if native in params:
                openai_like[name] = params[native]
        sampling = sampling_from_openai(openai_like, chat=False)
        tok = self._tokenizer(model)
        text = body.get("text")
        input_ids = body.get("input_ids")
        if isinstance(input_ids, list) and input_ids and all(type(t) is int for t in input_ids):
            ids = list(input_ids)
            text = text if isinstance(text, str) else ""
        elif isinstance(text, str):
            ids = await tok.encode(text, add_special_tokens=True)
        else:
            raise errors.missing_field("text")
        spec = OutputSpec(
            response_id=engine_id,
            model=model,
            created=int(time.time()),
            chat=False,
            n=sampling.n,
            stop=sampling.stop,
            skip_special_tokens=sampling.skip_special_tokens,
        )
        prepared = Prepared(model, tok, ids, text, sampling, spec)
        stream = body.get("stream") is True
        await self.admission.acquire()
        task = self.inflight.add()
        try:
            attempt = await self.pipeline.open(
                request,
                prepared,
                raw=engine_body(raw, body, engine_id),
                path="/generate",
                stream=stream,
            )
            if isinstance(attempt.response, aiohttp.ClientResponse):
                return await self.pipeline.relay.answer(request, attempt, request_id, stream)
            return await self._answer(request, attempt, prepared, stream)
        finally:
            self.inflight.remove(task)
            self.admission.release()

    async def _answer(
        self,
        request: web.Request,
        attempt: Attempt[EngineStream],
        prepared: Prepared,
        stream: bool,
    ) -> web.StreamResponse:
        spec = prepared.spec
        decode = prepared.tokenizer.decode_sync
        choices = [ChoiceState(i, decode, spec) for i in range(spec.n)]
        started = time.monotonic()
        resp: web.StreamResponse | None = None
        success: bool | None = None  # stays None if the client leaves first
        counts = {"prompt_tokens": 0, "cached_tokens": 0}
        failed = False  # the engine ended a choice with an error
        try:
            if stream:
                resp = web.StreamResponse(
                    headers={
                        **SSE_HEADERS,
                        "X-Request-Id": request["request_id"],
                        ROUTED_WORKER_HEADER: attempt.worker.worker_id,
                    }
                )
                await resp.prepare(request)
            async for ev in attempt.response.events():
                state = choices[ev.index] if 0 <= ev.index < len(choices) else None
                if state is None or state.done:
                    continue
                counts["prompt_tokens"] = max(counts["prompt_tokens"], ev.prompt_tokens)
                counts["cached_tokens"] = max(counts["cached_tokens"], ev.cached_tokens)
                state.completion_tokens = max(state.completion_tokens, ev.completion_tokens)
                ids_before = len(state.detok.ids)
                if isinstance(ev, TokenDelta):
                    state.text.append(state.feed(ev.token_ids))
                elif isinstance(ev, Finished):
                    failed = failed or ev.error is not None
                    state.text.append(state.finish(ev))
                if resp is not None and (len(state.detok.ids) > ids_before or state.done):
                    item = self._item(state, spec.response_id, counts, started)
                    await resp.write(b"data: " + orjson.dumps(item) + b"\n\n")
                if all(c.done for c in choices):
                    break
            success = not failed
            if resp is not None:
                await resp.write(b"data: [DONE]\n\n")
                await resp.write_eof()
                return resp
            items = [self._item(c, spec.response_id, counts, started) for c in choices]
            out = _json(items[0] if len(items) == 1 else items)
            out.headers[ROUTED_WORKER_HEADER] = attempt.worker.worker_id
            return out
        finally:
            await attempt.response.aclose()
            self.pipeline.runner.finish(attempt, success)

    @staticmethod
    def _item(
        state: ChoiceState, rid: str, counts: dict[str, int], started: float
    ) -> dict[str, Any]:
        finish: dict[str, Any] | None = None
        if state.done:
            finish = {"type": state.finish_reason}
            if state.matched_stop is not None:
                finish["matched"] = state.matched_stop
        return {
            "text": "".join(state.text),
            "output_ids": list(state.detok.ids),
            "meta_info": {
                "id": rid,
                "finish_reason": finish,
                "prompt_tokens": counts["prompt_tokens"],
                "completion_tokens": state.completion_tokens,
                "cached_tokens": counts["cached_tokens"],
                "e2e_latency": round(time.monotonic() - started, 6),
            },
        }
