"""Whatever comes in, the Gemini core answers in its contract: a request is mapped or refused
with a ProviderRequestError; an answer is a chat completion or an OpenAI error; a stream gives
frames and then [DONE] or a ProviderStreamError. Never another exception."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.providers.base import ProviderRequestError, ProviderStreamError
from smg.pipeline.providers.gemini import Gemini

KEYS = [
    "role", "content", "parts", "text", "thought", "functionCall", "name", "args", "candidates",
    "finishReason", "index", "usageMetadata", "promptTokenCount", "error", "code", "message",
    "details", "tool_calls", "function", "arguments", "id", "tool_call_id", "type", "model",
    "messages", "tools", "tool_choice", "response_format", "json_schema", "schema", "stop",
    "promptFeedback", "blockReason", "thoughtSignature", "anyOf", "properties", "items",
]  # fmt: skip
LEAF = st.none() | st.booleans() | st.integers(-3, 600) | st.sampled_from(["", "x", "STOP", "user"])


def _nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)


JSON = st.recursive(LEAF, _nest, max_leaves=16)


def gemini() -> Gemini:
    return Gemini(now=lambda: 1.0, new_id=lambda: "x")


TEXT_PART = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=4)})
CONTENT = st.text(max_size=4) | st.none() | st.lists(TEXT_PART, max_size=2) | JSON
CALL = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["c", "d"]),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["f", ""]),
                "arguments": st.sampled_from(["{}", '{"a":1}', "[", ""]),
            }
        ),
    }
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "x"])},
    optional={
        "content": CONTENT,
        "tool_calls": st.lists(CALL | JSON, max_size=2),
        "tool_call_id": st.sampled_from(["c", "d", ""]),
    },
)
FIRST = st.fixed_dictionaries({"role": st.just("user"), "content": st.text(max_size=4)})
FIELDS = ["tools", "tool_choice", "response_format", "stop", "temperature", "n", "max_tokens"]
REQUEST = st.fixed_dictionaries(
    {
        "model": st.just("g"),
        "messages": st.tuples(FIRST, st.lists(MESSAGE, max_size=4)).map(lambda m: [m[0], *m[1]]),
    },
    optional={name: JSON for name in FIELDS},
)


@settings(max_examples=examples(60), deadline=None)
@given(REQUEST, st.booleans())
def test_any_request_is_mapped_or_refused_by_name(body: dict[str, Any], stream: bool) -> None:
    try:
        out = gemini().chat_request(body, api_key="k", stream=stream)
    except ProviderRequestError as exc:
        assert exc.param
    else:
        assert isinstance(orjson.loads(out.body), dict)


@settings(max_examples=examples(80), deadline=None)
@given(JSON, st.sampled_from([200, 400, 429, 500, 503]))
def test_any_answer_is_a_completion_or_an_error(data: Any, status: int) -> None:
    got, body = gemini().chat_answer(status, orjson.dumps(data))
    answer = orjson.loads(body)
    assert ("choices" in answer) if got == 200 else ("error" in answer)


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(JSON, max_size=5))
def test_any_stream_gives_frames_then_done_or_a_stream_error(frames: list[Any]) -> None:
    translator = gemini().chat_stream("g")
    out = b"".join(translator.feed(b"data: " + orjson.dumps(f) + b"\r\n\r\n") for f in frames)
    try:
        out += translator.close()
    except ProviderStreamError as exc:
        assert 400 <= exc.status < 600
    else:
        assert out.endswith(b"data: [DONE]\n\n")
