"""Native endpoints: SGLang's `/generate`, `/v1/tokenize`, `/v1/detokenize` (the Rust gateway's
shapes: `{tokens, count, char_count}` and `{text}`) and
`/parse/*` (the reasoning and tool-call parsers on their own).

`/generate` runs through the flow like the OpenAI endpoints: in gRPC mode the token pipeline
answers it, rendered in SGLang's shapes (`GenerateShaper`), from one engine or a PD pair; for a
model served only by HTTP workers it is relayed to the worker as it is (SGLang servers answer it
themselves), batches included.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from smg import errors
from smg.api import requests as rq
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.pipeline.generate_output import GenerateShaper
from smg.pipeline.parsers import REASONING_PARSERS, TOOL_PARSERS, reasoning_parser, tool_parser


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


class NativeRoutes:
    def __init__(self, *, flow: Flow, max_payload: int) -> None:
        self.flow = flow
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

    async def tokenize(self, request: web.Request) -> web.Response:
        """The Rust gateway's `{model, prompt}` (a string, or a list of them: a batch) ->
        `{tokens, count, char_count}` (lists for a batch); no special tokens added unless
        `add_special_tokens: true`. smg also takes `messages` (rendered with the chat template,
        `add_generation_prompt` default true)."""
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        model = self.flow.resolve_model(body.get("model"))
        tok = self.flow.tokenizer(model)
        special = body.get("add_special_tokens", False) is True
        prompt = body.get("prompt")
        if "messages" in body:
            rq.check_chat({"messages": body["messages"]})
            if tok.chat_template is None:
                raise errors.invalid_request("The model has no chat template", param="messages")
            add_prompt = body.get("add_generation_prompt", True) is not False
            texts = [tok.chat_template.render(body["messages"], add_generation_prompt=add_prompt)]
        elif isinstance(prompt, str):
            texts = [prompt]
        elif isinstance(prompt, list) and all(isinstance(t, str) for t in prompt):
            texts = prompt
        elif prompt is None:
            raise errors.missing_field("prompt")
        else:
            raise errors.invalid_type(
                "'prompt' must be a string or a list of strings", param="prompt"
            )
        ids = [await tok.encode(t, add_special_tokens=special) for t in texts]
        if isinstance(prompt, list) and "messages" not in body:
            return _json(
                {
                    "tokens": ids,
                    "count": [len(i) for i in ids],
                    "char_count": [len(t) for t in texts],
                }
            )
        return _json({"tokens": ids[0], "count": len(ids[0]), "char_count": len(texts[0])})

    async def detokenize(self, request: web.Request) -> web.Response:
        """`{model, tokens}` (a list of ids, or a list of such lists: a batch;
        `skip_special_tokens` default true) -> `{text}` (a list for a batch)."""
        body = rq.parse_object(await rq.read_body(request, self.max_payload))
        model = self.flow.resolve_model(body.get("model"))
        tok = self.flow.tokenizer(model)
        tokens = body.get("tokens")
        if tokens is None:
            raise errors.missing_field("tokens")
        batch = isinstance(tokens, list) and bool(tokens) and isinstance(tokens[0], list)
        seqs = tokens if batch else [tokens]

        def is_ids(seq: object) -> bool:
            return isinstance(seq, list) and all(
                type(t) is int and 0 <= t < tok.vocab_size for t in seq
            )

        if not all(is_ids(seq) for seq in seqs):
            raise errors.invalid_type(
                "'tokens' must be a list of token ids or a list of such lists", param="tokens"
            )
        skip = body.get("skip_special_tokens", True) is not False
        texts = [await tok.decode(seq, skip_special_tokens=skip) for seq in seqs]
        return _json({"text": texts if batch else texts[0]})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        model = self.flow.resolve_model(body.get("model"), "/generate")
        req = rq.flow_request(request, Kind.GENERATE, "/generate", raw, body, model, None, "req-")
        return await self.flow.serve(req, GenerateShaper, request)
