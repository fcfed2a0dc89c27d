"""Rerank and classify (the Rust gateway's routes): `POST /rerank` (its `RerankRequest`: query,
documents, model, top_k, return_documents, rid), `POST /v1/rerank` (the same fields; the Rust
gateway's `V1RerankReqInput` reads query and documents only and routes to any worker, smg also
honours a `model`) and `POST /v1/classify` (vLLM's `{model, input}`).

They run through the flow like every other request (admission, policy, retries, breaker
reports), passed through to the HTTP workers serving the model at `/v1/rerank` and
`/v1/classify`. Classify's answer is relayed; rerank's is rebuilt in the Rust gateway's shape
(smg.pipeline.scoring). A worker's error answer is relayed as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from smg.api import requests as rq
from smg.flow.render import ROUTED_WORKER_HEADER
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.pipeline.output import openai_renderer
from smg.pipeline.scoring import build_failed, check_classify, check_rerank, rerank_body


class ScoringRoutes:
    def __init__(self, *, flow: Flow, max_payload: int) -> None:
        self.flow = flow
        self.max_payload = max_payload

    def install(self, app: web.Application) -> None:
        app.router.add_post("/rerank", self.rerank)
        app.router.add_post("/v1/rerank", self.rerank)
        app.router.add_post("/v1/classify", self.classify)

    async def rerank(self, request: web.Request) -> web.StreamResponse:
        body, resp = await self._serve(request, Kind.RERANK, "/v1/rerank", check_rerank, "rerank-")
        if resp.status != 200 or not isinstance(resp, web.Response):
            return resp
        try:
            data = resp.body  # the relay's buffer (a bytearray)
            answer = orjson.loads(data if isinstance(data, bytes | bytearray) else b"")
        except orjson.JSONDecodeError:
            raise build_failed() from None
        out = rerank_body(answer, body, self.flow.model_of(str(body["model"])), int(time.time()))
        headers = {
            k: v for k, v in resp.headers.items() if k in ("X-Request-Id", ROUTED_WORKER_HEADER)
        }
        return web.Response(
            body=orjson.dumps(out), content_type="application/json", headers=headers
        )

    async def classify(self, request: web.Request) -> web.StreamResponse:
        _, resp = await self._serve(
            request, Kind.CLASSIFY, "/v1/classify", check_classify, "classify-"
        )
        return resp

    async def _serve(
        self,
        request: web.Request,
        kind: Kind,
        path: str,
        check: Callable[[dict[str, Any]], None],
        prefix: str,
    ) -> tuple[dict[str, Any], web.StreamResponse]:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        model = self.flow.resolve_model(body.get("model"), path)
        check(body)
        if body.get("model") != model:  # the worker gets the model it serves
            body = {**body, "model": model}
            raw = orjson.dumps(body)
        req = rq.flow_request(request, kind, path, raw, body, model, None, prefix)
        resp = await self.flow.serve(req._replace(stream=False), openai_renderer, request)
        return body, resp
