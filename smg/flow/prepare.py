"""Prepare: what a request becomes before it is routed.

Token mode (the model has a gRPC engine among its workers): the gateway is the full OpenAI (or
SGLang) server over engines that see only token ids. A chat goes through the model's chat
template, a completion's prompt or /generate's text through the tokenizer (cached, off the
loop), or token ids given by the client are taken as they are; the result, `Prepared`, carries
the ids, the validated sampling params and the `OutputSpec` the renderer needs, and the route
keys on the ids. A model whose fleet mixes HTTP and gRPC workers still routes once, on tokens;
an HTTP worker picked that way gets the client's own body, relayed as in HTTP mode.

Pass-through (HTTP workers only): nothing is prepared; the route keys on the request's text when
the policy wants it (`route_text`).

`check` runs before the request takes an admission permit (what can be refused without IO is
refused there: a client's mistake never waits in the queue); `prepare` after.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smg import errors
from smg.core.snapshots import SnapshotCell, WorkerSnapshot
from smg.flow.request import TOKEN_KINDS, Kind, Request
from smg.pipeline.backends.grpc_pool import is_grpc_url
from smg.pipeline.chat_template import TemplateError
from smg.pipeline.engine_types import EngineRequest, SamplingParams
from smg.pipeline.output import OutputSpec
from smg.pipeline.parser_choice import ParserChoice, tool_choice
from smg.pipeline.parsers.types import Parser
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.sampling import sampling_from_sglang
from smg.pipeline.tokenizer import Tokenizer


@dataclass(slots=True)
class Prepared:
    """A request in token mode after the CPU stages, ready to route and send."""

    model: str
    tokenizer: Tokenizer
    input_ids: list[int]
    prompt_text: str
    sampling: SamplingParams
    spec: OutputSpec

    def engine_request(self, stream: bool) -> EngineRequest:
        return EngineRequest(
            request_id=self.spec.response_id,
            input_ids=tuple(self.input_ids),
            sampling=self.sampling,
            stream=stream,
            original_text=self.prompt_text,
        )


def token_mode(req: Request, candidates: tuple[WorkerSnapshot, ...]) -> bool:
    """True when the request takes the token pipeline: its model has a gRPC worker (embeddings,
    rerank and classify never do: there is nothing to generate)."""
    if req.kind in TOKEN_KINDS:
        for w in candidates:  # a loop, not any(generator): no generator frame per request
            if is_grpc_url(w.url):
                return True
    return False


class Preparer:
    def __init__(
        self,
        *,
        tokenizers: SnapshotCell[dict[str, Tokenizer]],
        parsers: ParserChoice,
        wants_text: bool,
        now: Callable[[], float],
    ) -> None:
        self.tokenizers = tokenizers
        self.parsers = parsers
        self.wants_text = wants_text  # the policy keys on request text (cache-aware, hashing)
        self.now = now

    # --- routing keys ----------------------------------------------------------------------------
    def route(self, req: Request, prepared: Prepared | None) -> RouteRequest:
        """What the policy sees: the prompt's token ids in token mode, else (if it wants it) the
        request's text."""
        if prepared is not None:
            return RouteRequest(
                tokens=prepared.input_ids, routing_key=req.routing_key, model=req.model
            )
        text = route_text(req.body) if self.wants_text else None
        return RouteRequest(text=text, routing_key=req.routing_key, model=req.model)

    # --- token mode ------------------------------------------------------------------------------
    def check(self, req: Request) -> SamplingParams:
        """Token mode's checks that need no IO (before admission); the sampling params."""
        if req.sampling is not None:
            return req.sampling
        if req.kind is Kind.GENERATE:
            sampling = sampling_from_sglang(req.body.get("sampling_params"))
            if _input_ids(req.body) is None and not isinstance(req.body.get("text"), str):
                raise errors.missing_field("text")
            return sampling
        raise AssertionError(f"{req.kind} has no token mode")

    def tokenizer(self, model: str, candidates: tuple[WorkerSnapshot, ...]) -> Tokenizer:
        tokenizers = self.tokenizers.value
        tok = tokenizers.get(model)
        if tok is None:  # a LoRA adapter: its base model's tokenizer
            base = next((w.model_id for w in candidates if w.model_id not in (None, model)), None)
            tok = None if base is None else tokenizers.get(base)
        if tok is None:
            now = self.now()
            if not any(w.routable(now) for w in candidates):
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

    async def prepare(
        self, req: Request, sampling: SamplingParams, candidates: tuple[WorkerSnapshot, ...]
    ) -> Prepared:
        tok = self.tokenizer(req.model, candidates)
        if req.kind is Kind.CHAT:
            return await self._chat(req, tok, sampling)
        if req.kind is Kind.COMPLETION:
            return await self._completion(req, tok, sampling)
        return await self._generate(req, tok, sampling)

    async def _chat(self, req: Request, tok: Tokenizer, sampling: SamplingParams) -> Prepared:
        body, model = req.body, req.model
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
        parser = self.parsers.factory(body, model, prompt, tools, choice, req.engine_id)
        spec = _openai_spec(body, sampling, model, req.engine_id, True, parser)
        return Prepared(model, tok, ids, prompt, sampling, spec)

    async def _completion(self, req: Request, tok: Tokenizer, sampling: SamplingParams) -> Prepared:
        body = req.body
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
        spec = _openai_spec(body, sampling, req.model, req.engine_id, False)
        if body.get("echo") is True:
            spec = dataclasses.replace(spec, echo_prompt=text or tok.decode_sync(ids, False))
        return Prepared(req.model, tok, ids, text, sampling, spec)

    async def _generate(self, req: Request, tok: Tokenizer, sampling: SamplingParams) -> Prepared:
        """SGLang's /generate: `input_ids` (one list of ids) as they are, else `text`."""
        body = req.body
        text = body.get("text")
        ids = _input_ids(body)
        if ids is not None:
            text = text if isinstance(text, str) else ""
        else:
            assert isinstance(text, str)  # `check` refused the rest
            ids = await tok.encode(text, add_special_tokens=True)
        spec = OutputSpec(
            response_id=req.engine_id,
            model=req.model,
            created=int(time.time()),
            chat=False,
            n=sampling.n,
            stop=sampling.stop,
            skip_special_tokens=sampling.skip_special_tokens,
        )
        return Prepared(req.model, tok, ids, text, sampling, spec)


def _input_ids(body: dict[str, Any]) -> list[int] | None:
    ids = body.get("input_ids")
    if isinstance(ids, list) and ids and all(type(t) is int for t in ids):
        return list(ids)
    return None


def _openai_spec(
    body: dict[str, Any],
    sampling: SamplingParams,
    model: str,
    engine_id: str,
    chat: bool,
    parser: Callable[[], Parser] | None = None,
) -> OutputSpec:
    """The spec of an OpenAI chat or completion answer, its parser (chat) given here: one
    frozen spec built, not a second by `dataclasses.replace`."""
    options = body.get("stream_options")
    return OutputSpec(
        response_id=engine_id,
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
        parser=parser,
        parallel_tool_calls=parser is None or body.get("parallel_tool_calls") is not False,
    )


def route_text(body: dict[str, Any]) -> str | None:
    """The text cache-aware and hashing policies key on: the prompt, or the messages' text."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return "".join(p for p in prompt if isinstance(p, str))
    messages = body.get("messages")
    if isinstance(messages, list):
        parts: list[str] = []
        for m in messages:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                for piece in content:
                    if isinstance(piece, dict) and isinstance(piece.get("text"), str):
                        parts.append(piece["text"])
        return "".join(parts)
    inp = body.get("input")
    if isinstance(inp, str):
        return inp
    return None
