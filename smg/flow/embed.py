"""Embeddings in token mode: a model served by gRPC engines answers `/v1/embeddings` itself.

The edge's body is checked before admission (`check`: smg.pipeline.embeddings reads the inputs;
a client's mistake is a 400 there, never an engine's failure); after it, each string input is
tokenized with the model's tokenizer (token-id inputs are taken as they are) and the runner opens
one attempt on a worker like any other request (policy, retries, deadline, breaker reports,
in-flight counts). On an engine the attempt is one Embed call per input, run together; their
vectors become OpenAI's answer. An HTTP worker of a mixed fleet gets the client's bytes, relayed
as in pass-through mode.

An engine that refuses an input (INVALID_ARGUMENT, say: too long for its context) answers the
client 400 and tells its breaker nothing (`grpc_pool.refusal`); an engine that cannot be reached
or is overloaded is a failed attempt, retried elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from aiohttp import web

from smg import errors
from smg.core.dp import rank_of
from smg.core.snapshots import WorkerSnapshot
from smg.flow.answer import Answer
from smg.flow.prepare import Preparer
from smg.flow.render import ROUTED_WORKER_HEADER
from smg.flow.request import Kind, Request
from smg.flow.single import SingleWorker
from smg.pipeline.backends.grpc_errors import EngineError
from smg.pipeline.backends.grpc_pool import EngineClient, is_grpc_url, refusal
from smg.pipeline.backends.h1_body import H1Response
from smg.pipeline.embeddings import Input, embedding_inputs, embeddings_body, routing_text
from smg.pipeline.policies.base import RouteRequest


class Embedded:
    """An engine's answer to every input of one request (the runner's `Opened`)."""

    __slots__ = ("prompt_tokens", "status", "vectors")

    def __init__(self, vectors: list[list[float]], prompt_tokens: int) -> None:
        self.vectors = vectors
        self.prompt_tokens = prompt_tokens
        self.status = 200

    def release(self) -> None:
        """Nothing held: the calls are over."""


def wants_engines(req: Request, candidates: tuple[WorkerSnapshot, ...]) -> bool:
    """True when an embeddings request is answered by the gateway over gRPC engines."""
    return req.kind is Kind.EMBEDDINGS and any(is_grpc_url(w.url) for w in candidates)


class Embedder:
    def __init__(self, *, single: SingleWorker, preparer: Preparer) -> None:
        self.single = single
        self.preparer = preparer

    def check(self, req: Request) -> list[Input]:
        """The inputs (before admission); a client's mistake raises `ApiError` 400."""
        return embedding_inputs(req.body)

    async def serve(
        self,
        client: web.Request,
        req: Request,
        raw: bytes,
        inputs: list[Input],
        candidates: tuple[WorkerSnapshot, ...],
    ) -> Answer:
        tok = self.preparer.tokenizer(req.model, candidates)
        tokenized: list[tuple[list[int], str]] = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                ids = await tok.encode(item, add_special_tokens=True)
                if not ids:
                    raise errors.invalid_request(
                        f"input {i} has no tokens", param="input", code="empty_input"
                    )
                tokenized.append((ids, item))
            else:
                tokenized.append((item, ""))
        route = RouteRequest(
            text=routing_text(inputs) or None,
            tokens=[t for ids, _ in tokenized for t in ids],
            routing_key=req.routing_key,
            model=req.model,
        )
        runner = self.single.runner
        attempt = await runner.open(
            model=req.model,
            route=route,
            send=self._sender(req, raw, tokenized),
            request_id=req.client_id,
        )
        response = attempt.response
        if isinstance(response, H1Response):
            return await self.single.relay.answer(client, attempt, req.client_id, False)
        runner.finish(attempt, True)
        body = embeddings_body(
            req.model, response.vectors, response.prompt_tokens, req.body.get("encoding_format")
        )
        headers = {"X-Request-Id": req.client_id, ROUTED_WORKER_HEADER: attempt.worker.worker_id}
        return web.Response(
            body=orjson.dumps(body), content_type="application/json", headers=headers
        )

    def _sender(
        self, req: Request, raw: bytes, tokenized: list[tuple[list[int], str]]
    ) -> Callable[[WorkerSnapshot, float], Awaitable[Any]]:
        engines, backend = self.single.engines, self.single.relay.backend
        path, headers, engine_id = req.path, req.headers, req.engine_id

        def send(worker: WorkerSnapshot, timeout_s: float) -> Awaitable[Any]:
            if is_grpc_url(worker.url):
                client, rank = engines.client(worker.url), rank_of(worker.url)
                return embed_all(client, engine_id, tokenized, timeout_s, rank)
            fwd = backend.forward_headers(headers, worker, engine_id)
            return backend.open(worker, path, raw, fwd, timeout_s)

        return send


async def embed_all(
    client: EngineClient,
    engine_id: str,
    tokenized: Sequence[tuple[list[int], str]],
    timeout_s: float,
    rank: int | None = None,
) -> Embedded:
    """One Embed call per input, all at once; the first failure ends the others."""

    async def one(index: int, ids: list[int], text: str) -> tuple[list[float], int]:
        request_id = engine_id if len(tokenized) == 1 else f"{engine_id}-{index}"
        try:
            return await client.embed(request_id, ids, text, timeout_s, rank)
        except EngineError as exc:
            raise refusal(exc, client.url, request_id) from exc

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(one(i, ids, text)) for i, (ids, text) in enumerate(tokenized)
            ]
    except ExceptionGroup as failed:  # the first of the failures is the answer's
        raise failed.exceptions[0] from None
    results = [t.result() for t in tasks]
    return Embedded([vec for vec, _ in results], sum(n for _, n in results))
