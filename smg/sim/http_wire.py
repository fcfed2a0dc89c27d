"""The simulated HTTP worker's wire format: OpenAI-style SSE chunks and JSON bodies.

Stream chunks are built from bytes templates: a chunk is a per-request head (`CHUNK_HEAD`
filled in, plus the choice index) followed by a per-token tail (`chat_tail`, `text_tail`), so
the handler joins precomputed tails instead of serialising each chunk.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from smg.errors import ApiError, invalid_json, invalid_request
from smg.sim.plan import CONTEXT_LENGTH, Plan

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"
CHUNK_HEAD = b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":[{"index":'
ROLE_TAIL = b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
CHAT_END = b'"delta":{},"logprobs":null,"finish_reason":"%s"}]}\n\n'
TEXT_END = b'"text":"","logprobs":null,"finish_reason":"%s"}]}\n\n'


_CHAT_TAIL = b'"delta":{"content":%s},"logprobs":null,"finish_reason":null}]}\n\n'
_TEXT_TAIL = b'"text":%s,"logprobs":null,"finish_reason":null}]}\n\n'


def chat_tail(word: str) -> bytes:
    """The rest of a chat stream chunk that carries `word`."""
    return _CHAT_TAIL % orjson.dumps(word)


def text_tail(word: str) -> bytes:
    """The rest of a completions stream chunk that carries `word`."""
    return _TEXT_TAIL % orjson.dumps(word)


def usage(plan: Plan) -> dict[str, int]:
    completion = plan.max_tokens * len(plan.offsets)
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.prompt_tokens + completion,
    }


def error_response(err: ApiError) -> web.Response:
    return web.Response(status=err.status, body=err.to_json(), content_type="application/json")


def json_response(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")


async def read_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_json(str(exc)) from None
    if not isinstance(body, dict):
        raise invalid_request("Request body must be a JSON object")
    return body


def behaviour_changes(body: dict[str, Any]) -> dict[str, Any]:
    """The `Behaviour` fields a `POST /sim/config` body sets, validated."""
    changes: dict[str, Any] = {}
    for name, value in body.items():
        number = type(value) in (int, float)
        if name == "failure_rate" and number and 0.0 <= value <= 1.0:
            changes[name] = float(value)
        elif (
            name in ("first_token_ms", "tokens_per_second", "health_delay_ms")
            and number
            and (value >= 0)
        ):
            changes[name] = float(value)
        elif name == "output_tokens" and type(value) is int and 0 <= value <= CONTEXT_LENGTH:
            changes[name] = value
        elif name == "status_override" and (
            value is None or (type(value) is int and 100 <= value <= 599)
        ):
            changes[name] = value
        else:
            raise invalid_request(f"Bad or unknown sim setting: {name}={value!r}", param=name)
    return changes
