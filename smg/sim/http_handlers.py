"""The simulated HTTP worker's generation handlers (`SimWorker`; its state and its discovery,
health and control handlers are `http_admin.SimAdmin`'s).

Output text comes from `smg.sim.text` (deterministic per worker seed, request seed and prompt).
Latency is simulated with an injectable `clock_sleep`: `first_token_ms` before the first token,
then 1/`tokens_per_second` between tokens; non-streaming answers take both as one sleep. With no
decode delay a stream is written `_BATCH_TOKENS` chunks per write, yielding to the loop between
writes, so the worker stays cheap at thousands of requests per second.

Behaviour can change live (`POST /sim/config`, `POST /sim/health`); the handlers read one
immutable `Behaviour` snapshot per request. `GET /sim/stats` reports counters:
requests (generation + embedding requests received), completed (answered in full), failed
(answered with an error: bad input, injected failure, status override), cancelled_streams
(streams whose client left; generation stops at the next write or, under `serve`, at once),
in_flight.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import struct
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from smg.config import SimConfig
from smg.errors import ApiError, invalid_request, missing_field
from smg.sim import chat_script as scripted
from smg.sim import http_native as native
from smg.sim import scoring
from smg.sim.chat_script import scripted_reply
from smg.sim.http_admin import Behaviour, SimAdmin, Sleep
from smg.sim.http_wire import (
    CHAT_END,
    CHUNK_HEAD,
    DONE,
    ROLE_TAIL,
    SSE_HEADERS,
    TEXT_END,
    chat_tail,
    error_response,
    json_response,
    read_object,
    text_tail,
    usage,
)
from smg.sim.plan import Plan, int_field, plan_request, prompt_keys
from smg.sim.script import Script, parse_script
from smg.sim.text import EMBED_DIMS, TextGen, embedding, spans

MAX_EMBED_DIMS = 4096
_BATCH_TOKENS = 64  # stream chunks per write when there is no decode delay


class SimWorker(SimAdmin):
    """One simulated worker: its generation handlers here, its state and its discovery, health
    and control handlers in `SimAdmin`; lives on one event loop, so no locks."""

    def __init__(self, cfg: SimConfig, clock_sleep: Sleep = asyncio.sleep) -> None:
        super().__init__(cfg, clock_sleep)
        self.script = parse_script(Path(cfg.script).read_text()) if cfg.script else Script()
        self.gen = TextGen(cfg.seed)
        self._fail_rng = random.Random(cfg.seed ^ 0x5EED_FA11)
        self._ids = itertools.count(1)
        self._id_tag = os.urandom(4).hex()
        # Per-position chunk tails: a chunk is `head + tail`, so a batch is `head.join(tails)`.
        self._chat_tails = self.gen.map(chat_tail)
        self._text_tails = self.gen.map(text_tail)

    # ---- generation -------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "text")

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "embed")

    async def rerank(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "rerank")

    async def classify(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "classify")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's native /generate (its shapes: http_native.py)."""
        return await self._hot(request, "native")

    async def _hot(self, request: web.Request, kind: str) -> web.StreamResponse:
        st = self.stats
        st.requests += 1
        st.in_flight += 1
        st.last_traceparent = request.headers.get("traceparent", "")
        rank = None
        try:
            beh = self.behaviour
            body = await read_object(request)
            rank = self._count_rank(body)
            self._rank_load[rank] += 1
            if kind == "embed":
                return await self._embed(body, beh)
            if kind in ("rerank", "classify"):
                return self._score(body, beh, kind)
            if kind == "native":
                return await self._native(request, native.completion_body(body), beh)
            return await self._generate(request, body, beh, kind == "chat")
        except ApiError as err:
            st.failed += 1
            return error_response(err)
        finally:
            st.in_flight -= 1
            if rank is not None:
                self._rank_load[rank] -= 1

    def _score(self, body: dict[str, Any], beh: Behaviour, kind: str) -> web.Response:
        """/v1/rerank (SGLang's bare list of results) and /v1/classify (vLLM's body)."""
        seed = self.cfg.seed
        if kind == "rerank":
            answer: Any = scoring.rerank_results(seed, body)
        else:
            rid, created = self._new_id("classify"), int(time.time())
            answer = scoring.classify_body(seed, body, self.cfg.model, rid, created)
        self._check_failure(beh)
        self.stats.completed += 1
        return json_response(answer)

    def _count_rank(self, body: dict[str, Any]) -> int:
        """SGLang's `data_parallel_rank`: an int below the server's dp size, else 400. The rank
        that runs the request (one named none: rank 0)."""
        rank = body.get("data_parallel_rank")
        if rank is None:
            rank = -1
        elif type(rank) is not int or not 0 <= rank < self.cfg.dp_size:
            msg = f"data_parallel_rank must be an integer in [0, {self.cfg.dp_size})"
            raise invalid_request(msg, param="data_parallel_rank")
        ranks = self.stats.dp_ranks
        ranks[str(rank)] = ranks.get(str(rank), 0) + 1
        return max(rank, 0)

    def _check_failure(self, beh: Behaviour) -> None:
        if beh.status_override is not None:
            code = beh.status_override
            raise ApiError(code, "sim_status_override", f"Simulated status {code}")
        if beh.failure_rate > 0 and self._fail_rng.random() < beh.failure_rate:
            raise ApiError(500, "sim_injected_failure", "Simulated worker failure")

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{self._id_tag}{next(self._ids):x}"

    async def _generate(
        self, request: web.Request, body: dict[str, Any], beh: Behaviour, chat: bool
    ) -> web.StreamResponse:
        body = self._pd_role(body)
        tokens, model = beh.output_tokens, self.cfg.model
        plan = plan_request(
            body, chat=chat, default_tokens=tokens, default_model=model, gen=self.gen
        )
        self._check_failure(beh)
        reply = scripted_reply(body, self.script) if chat else None
        if reply is not None:
            said = scripted.answer(reply, bool(body.get("tools")), self._id_tag)
            return await self._scripted(request, plan, beh, said)
        tokens = plan.prompt_tokens + plan.max_tokens * len(plan.offsets)
        self.stats.in_flight_tokens += tokens
        try:
            if plan.stream:
                return await self._stream(request, plan, beh)
            return await self._unary(plan, beh)
        finally:
            self.stats.in_flight_tokens -= tokens

    async def _scripted(
        self, request: web.Request, plan: Plan, beh: Behaviour, said: scripted.ScriptedAnswer
    ) -> web.StreamResponse:
        """A scripted chat answer (smg.sim.chat_script), whole or as one burst of chunks."""
        if beh.first_token_ms > 0:
            await self.sleep(beh.first_token_ms / 1000.0)
        rid, created = self._new_id("chatcmpl"), int(time.time())
        tokens = max(1, len(said.text) // 4)
        use = {
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": plan.prompt_tokens + tokens,
        }
        head = {"id": rid, "created": created, "model": plan.model}
        self.stats.completed += 1
        if not plan.stream:
            message: dict[str, Any] = {"role": "assistant", "content": said.content}
            if said.reasoning:
                message["reasoning_content"] = said.reasoning
            if said.tool_calls:
                message["tool_calls"] = list(said.tool_calls)
            choice = {"index": 0, "message": message, "logprobs": None}
            choice["finish_reason"] = said.finish_reason
            return json_response(
                {**head, "object": "chat.completion", "choices": [choice], "usage": use}
            )

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            frame = {**head, "object": "chat.completion.chunk", "choices": [choice]}
            return b"data: %s\n\n" % orjson.dumps(frame)

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk(delta) for delta in scripted.stream_deltas(said)]
        out.append(chunk({}, said.finish_reason))
        if plan.include_usage:
            last = {**head, "object": "chat.completion.chunk", "choices": [], "usage": use}
            out.append(b"data: %s\n\n" % orjson.dumps(last))
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        await resp.write_eof(b"".join([*out, DONE]))
        return resp

    async def _native(
        self, request: web.Request, body: dict[str, Any], beh: Behaviour
    ) -> web.StreamResponse:
        body = self._pd_role(body)
        plan = plan_request(
            body,
            chat=False,
            default_tokens=beh.output_tokens,
            default_model=self.cfg.model,
            gen=self.gen,
        )
        self._check_failure(beh)
        rid = self._new_id("gen")
        if not plan.stream:
            if beh.first_token_ms > 0:
                await self.sleep(beh.first_token_ms / 1000.0)
            self.stats.completed += 1
            whole = native.answer(rid, plan, self.gen)
            return web.Response(body=whole, content_type="application/json")
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        for frame in native.frames(rid, plan, self.gen):
            await resp.write(frame)
        await resp.write_eof()
        self.stats.completed += 1
        return resp

    def _pd_role(self, body: dict[str, Any]) -> dict[str, Any]:
        """Count the request's bootstrap room; a decode worker insists on the bootstrap fields,
        a prefill worker answers one token (its real output is the KV cache it hands over)."""
        room = body.get("bootstrap_room")
        role = self.cfg.role
        if role == "decode":
            host, port = body.get("bootstrap_host"), body.get("bootstrap_port", "missing")
            if not isinstance(host, str) or type(room) is not int:
                raise invalid_request(
                    "A decode worker needs bootstrap_host and bootstrap_room",
                    param="bootstrap_room",
                )
            if port is not None and type(port) is not int:
                raise invalid_request(
                    "bootstrap_port must be an integer or null", param="bootstrap_port"
                )
        if room is not None:
            key = str(room)
            self.stats.rooms[key] = self.stats.rooms.get(key, 0) + 1
        if role == "prefill":
            body = {k: v for k, v in body.items() if k != "max_completion_tokens"}
            body["max_tokens"] = 1
        return body

    async def _unary(self, plan: Plan, beh: Behaviour) -> web.Response:
        delay = beh.first_token_ms / 1000.0
        if beh.tokens_per_second > 0 and plan.max_tokens > 1:
            delay += (plan.max_tokens - 1) / beh.tokens_per_second
        if delay > 0:
            await self.sleep(delay)
        choices = []
        for index, offset in enumerate(plan.offsets):
            text = self.gen.text(offset, plan.max_tokens)
            choice: dict[str, Any] = {"index": index}
            if plan.chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            choice["logprobs"] = None
            choice["finish_reason"] = plan.finish
            choices.append(choice)
        answer = {
            "id": self._new_id("chatcmpl" if plan.chat else "cmpl"),
            "object": "chat.completion" if plan.chat else "text_completion",
            "created": int(time.time()),
            "model": plan.model,
            "choices": choices,
            "usage": usage(plan),
        }
        self.stats.completed += 1
        return json_response(answer)

    async def _stream(self, request: web.Request, plan: Plan, beh: Behaviour) -> web.StreamResponse:
        rid = self._new_id("chatcmpl" if plan.chat else "cmpl")
        obj = "chat.completion.chunk" if plan.chat else "text_completion"
        created = int(time.time())
        prefix = CHUNK_HEAD % (rid.encode(), obj.encode(), created, orjson.dumps(plan.model))
        heads = [prefix + b"%d," % i for i in range(len(plan.offsets))]
        tails = self._chat_tails if plan.chat else self._text_tails
        gap = 1.0 / beh.tokens_per_second if beh.tokens_per_second > 0 else 0.0
        batch = 1 if gap else _BATCH_TOKENS
        out: list[bytes] = [head + ROLE_TAIL for head in heads] if plan.chat else []
        resp = web.StreamResponse(headers=SSE_HEADERS)
        try:
            if beh.first_token_ms > 0:
                await self.sleep(beh.first_token_ms / 1000.0)
            await resp.prepare(request)
            total, done = plan.max_tokens, 0
            while True:
                count = min(batch, total - done)
                for head, offset in zip(heads, plan.offsets, strict=True):
                    for begin, end in spans(offset, done, count):
                        out.append(head)
                        out.append(head.join(tails[begin:end]))
                done += count
                if done >= total:
                    break
                await resp.write(b"".join(out))
                out.clear()
                await (self.sleep(gap) if gap else asyncio.sleep(0))
            end_tail = (CHAT_END if plan.chat else TEXT_END) % plan.finish.encode()
            out.extend(head + end_tail for head in heads)
            if plan.include_usage:
                last = {"id": rid, "object": obj, "created": created, "model": plan.model}
                last |= {"choices": [], "usage": usage(plan)}
                out.append(b"data: %s\n\n" % orjson.dumps(last))
            out.append(DONE)
            await resp.write(b"".join(out))
            await resp.write_eof()
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError: the client left
            self.stats.cancelled_streams += 1
            return resp
        except asyncio.CancelledError:  # handler cancelled because the client left
            self.stats.cancelled_streams += 1
            raise
        self.stats.completed += 1
        return resp

    async def _embed(self, body: dict[str, Any], beh: Behaviour) -> web.Response:
        if body.get("input") is None:
            raise missing_field("input")
        keys = prompt_keys(body["input"])  # the same shapes as a completions prompt
        dims = int_field(body, "dimensions", EMBED_DIMS, 1, MAX_EMBED_DIMS)
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise invalid_request(
                "'encoding_format' must be float or base64", param="encoding_format"
            )
        self._check_failure(beh)
        if beh.first_token_ms > 0:
            await self.sleep(beh.first_token_ms / 1000.0)
        data = []
        for index, (crc, _) in enumerate(keys):
            vec = embedding(self.cfg.seed, crc, dims)
            value: Any = vec
            if fmt == "base64":
                value = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode()
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(t for _, t in keys)
        model = body.get("model")
        self.stats.completed += 1
        return json_response(
            {
                "object": "list",
                "data": data,
                "model": model if isinstance(model, str) else self.cfg.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
