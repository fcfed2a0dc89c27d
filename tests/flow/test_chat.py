"""An HTTP worker's chat answer read back for the Responses renderer (smg.flow.chat), against
a real aiohttp worker on loopback in this process: a whole answer, a stream, a stream asked but
one document answered, and answers of the wrong shape (502 `upstream_bad_answer`, or a
`response.failed` event once the stream has begun); the attempt is settled once, rightly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from smg.errors import ApiError
from smg.flow.chat import ChatAnswer
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.responses_renderer import ResponsesRenderer
from smg.pipeline.responses_request import parse_responses


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


WHOLE = {
    "choices": [{"index": 0, "message": {"content": "Hi there."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}
USAGE = b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\n'
ANSWERS: dict[str, tuple[str, bytes]] = {
    "whole": ("application/json", orjson.dumps(WHOLE)),
    "not-json": ("application/json", b"{oops"),
    "no-choices": ("application/json", b'{"choices": []}'),
    "stream": (
        "text/event-stream",
        chunk({"content": "Hi"})
        + chunk({"content": " there."}, "stop")
        + USAGE
        + b"data: [DONE]\n\n",
    ),
    "stream-broken": ("text/event-stream", chunk({"content": "Hi"}) + b"data: {nope\n\n"),
}


class Settled:
    """Records the outcome each answer leaves for its caller to settle."""

    def __init__(self) -> None:
        self.outcomes: list[bool | None] = []


async def worker_answer(request: web.Request) -> web.Response:
    kind, body = ANSWERS[request.match_info["case"]]
    return web.Response(body=body, content_type=kind)


@pytest.fixture
async def setup() -> AsyncIterator[tuple[TestClient[Any, Any], Settled]]:
    upstream = web.Application()
    upstream.router.add_post("/{case}/v1/chat/completions", worker_answer)
    settled = Settled()
    async with TestServer(upstream) as worker, aiohttp.ClientSession() as session:
        backend = HttpBackend(session, 10.0)

        async def gateway(request: web.Request) -> web.StreamResponse:
            stream = request.query.get("stream") == "1"
            url = worker.make_url(f"/{request.match_info['case']}/v1/chat/completions")
            upstream = await session.post(url, data=b"{}")
            req = parse_responses({"model": "m", "input": "hi", "stream": stream})
            renderer = ResponsesRenderer(req, "resp_ab").for_chat(1700000000)
            answer = ChatAnswer(
                backend,
                request,
                upstream,
                renderer,
                request_id="rid",
                worker_id="w1",
                headers={"X-Request-Id": "rid"},
            )
            try:
                return await answer.answer(stream)
            except ApiError as err:
                return web.Response(
                    status=err.status, body=err.to_json(), content_type="application/json"
                )
            finally:
                settled.outcomes.append(answer.success)

        app = web.Application()
        app.router.add_post("/{case}", gateway)
        async with TestClient(TestServer(app)) as client:
            yield client, settled


def events(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(f.split(b"\ndata: ", 1)[1]) for f in data.split(b"\n\n") if f]


async def test_a_whole_answer_and_a_stream_give_the_same_response(
    setup: tuple[TestClient[Any, Any], Settled],
) -> None:
    client, settled = setup
    whole = await (await client.post("/whole")).json()
    got = events(await (await client.post("/stream", params={"stream": "1"})).read())
    assert got[-1]["type"] == "response.completed"
    assert got[-1]["response"] == whole
    assert whole["output"][0]["content"][0]["text"] == "Hi there."
    assert whole["usage"]["input_tokens"] == 5 and whole["usage"]["output_tokens"] == 2
    assert settled.outcomes == [True, True]


async def test_a_stream_asked_and_one_document_answered_is_the_same_events(
    setup: tuple[TestClient[Any, Any], Settled],
) -> None:
    client, settled = setup
    got = events(await (await client.post("/whole", params={"stream": "1"})).read())
    assert [e["type"] for e in got][:2] == ["response.created", "response.in_progress"]
    assert got[-1]["type"] == "response.completed"
    assert got[-1]["response"]["output"][0]["content"][0]["text"] == "Hi there."
    assert settled.outcomes == [True]


@pytest.mark.parametrize("case", ["not-json", "no-choices"])
async def test_a_whole_answer_of_the_wrong_shape_is_a_502_and_the_workers_failure(
    setup: tuple[TestClient[Any, Any], Settled], case: str
) -> None:
    client, settled = setup
    resp = await client.post(f"/{case}")
    assert resp.status == 502
    assert (await resp.json())["error"]["code"] == "upstream_bad_answer"
    assert settled.outcomes == [False]


async def test_a_stream_that_turns_bad_ends_with_response_failed(
    setup: tuple[TestClient[Any, Any], Settled],
) -> None:
    client, settled = setup
    got = events(await (await client.post("/stream-broken", params={"stream": "1"})).read())
    assert "response.output_text.delta" in [e["type"] for e in got]
    assert got[-1]["type"] == "response.failed"
    assert got[-1]["response"]["error"]["code"] == "server_error"
    assert settled.outcomes == [False]
