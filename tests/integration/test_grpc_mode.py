"""gRPC mode end to end: the `openai` SDK -> gateway (template, tokenize, detokenize, stop
strings) -> simulated vLLM and SGLang engines speaking the published gRPC contract.

One gateway fronts a mixed fleet for the whole module: a vLLM engine and an SGLang engine (one
token per streamed message, so streaming splits text as finely as it can), a slow vLLM engine for
the disconnect test, and an HTTP `smg sim` worker. The gateway has no --tokenizer-path: it fetches
each engine's tokenizer with GetTokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from tokenizers import Tokenizer

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import Engine, Gateway, Launcher, Sim, assert_openai_error, wait_until

RUNTIMES = ("vllm", "sglang")
MSGS = [{"role": "user", "content": "Tell me a story about a gateway."}]
EMOJI_CJK = "Hi 👋🏽 世界 😀 done"
STOP = "##END##"
# "##EN" looks like the start of the stop string and is not: it must come out, late but whole.
STOP_REPLY = "Count: 1, 2, ##EN 3, ##END## 4, 5"
BEFORE_STOP = "Count: 1, 2, ##EN 3, "


@dataclass
class Fleet:
    gw: Gateway
    engines: dict[str, Engine]  # by runtime
    slow: Engine
    http_sim: Sim
    client: openai.OpenAI

    def tokenize(self, model: str, **body: Any) -> list[int]:
        r = self.gw.request("POST", "/v1/tokenize", {"model": model, **body})
        assert r.status == 200, r
        out = r.json()
        assert out["count"] == len(out["tokens"]), out
        return out["tokens"]

    def count(self, model: str, text: str) -> int:
        return len(self.tokenize(model, prompt=text, add_special_tokens=False))


@pytest.fixture(scope="module")
def fleet(module_launch: Launcher) -> Iterator[Fleet]:
    started = [
        module_launch.start_engine("grpc-vllm", "vllm", chunk_tokens=1),
        module_launch.start_engine("grpc-sglang", "sglang", chunk_tokens=1),
        module_launch.start_engine("grpc-slow", "vllm", decode_ms_per_token=50),
    ]
    http_sim = module_launch.sim("http-model")
    vllm, sglang, slow = (module_launch.wait_engine(e) for e in started)
    gw = module_launch.gateway([vllm, sglang, slow, http_sim])
    with gw.client() as client:
        yield Fleet(gw, {"vllm": vllm, "sglang": sglang}, slow, http_sim, client)


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def model_of(runtime: str) -> str:
    return f"grpc-{runtime}"


def reply(text: str) -> list[dict[str, str]]:
    """Messages that make the simulated engine answer exactly `text`."""
    return [{"role": "user", "content": f"SIM_REPLY: {text}"}]


def deltas(chunks: list[Any], index: int = 0) -> list[str]:
    return [
        c.delta.content or ""
        for chunk in chunks
        for c in chunk.choices
        if c.index == index and c.delta is not None
    ]


def finishes(chunks: list[Any], index: int = 0) -> list[str]:
    return [
        c.finish_reason
        for chunk in chunks
        for c in chunk.choices
        if c.index == index and c.finish_reason is not None
    ]


def usage_of(u: Any) -> tuple[int, int, int]:
    return (u.prompt_tokens, u.completion_tokens, u.total_tokens)


# --- 1. streaming equals unary; usage is exact ---------------------------------------------------


def test_chat_stream_equals_unary_and_usage_is_exact(fleet: Fleet, runtime: str) -> None:
    model, c = model_of(runtime), fleet.client
    kw: dict[str, Any] = dict(model=model, messages=MSGS, max_tokens=12, seed=1234, temperature=0.9)
    whole = c.chat.completions.create(**kw)
    assert whole.model == model and len(whole.choices) == 1
    choice = whole.choices[0]
    text = choice.message.content
    assert choice.finish_reason == "length" and text, whole

    chunks = list(
        c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(deltas(chunks)) == text
    assert finishes(chunks) == ["length"]
    with_usage = [ch for ch in chunks if ch.usage is not None]
    assert with_usage == [chunks[-1]] and chunks[-1].choices == [], chunks[-1]

    prompt_tokens = len(fleet.tokenize(model, messages=MSGS))
    assert usage_of(whole.usage) == (prompt_tokens, 12, prompt_tokens + 12)
    assert usage_of(chunks[-1].usage) == usage_of(whole.usage)
    assert fleet.count(model, text) == 12  # the returned text is exactly the 12 tokens

    plain = list(c.chat.completions.create(**kw, stream=True))  # no include_usage: no usage
    assert "".join(deltas(plain)) == text
    assert all(ch.usage is None for ch in plain)


def test_completion_stream_equals_unary_and_usage_is_exact(fleet: Fleet, runtime: str) -> None:
    model, c = model_of(runtime), fleet.client
    prompt = "Once upon a time, a gateway"
    kw: dict[str, Any] = dict(model=model, prompt=prompt, max_tokens=9, seed=77, temperature=0.7)
    whole = c.completions.create(**kw)
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and choice.text, whole

    chunks = list(c.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert streamed == choice.text
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(ch.usage is None for ch in chunks[:-1])

    prompt_tokens = len(fleet.tokenize(model, prompt=prompt))
    assert usage_of(whole.usage) == (prompt_tokens, 9, prompt_tokens + 9)
    assert usage_of(chunks[-1].usage) == usage_of(whole.usage)
    assert fleet.count(model, choice.text) == 9


# --- 2. multi-token characters come out whole ----------------------------------------------------


def test_emoji_and_cjk_split_across_tokens_come_out_whole(fleet: Fleet, runtime: str) -> None:
    tok = Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))
    ids = tok.encode(EMOJI_CJK, add_special_tokens=False).ids
    partial = [i for i in ids if "\ufffd" in tok.decode([i])]
    assert partial, "the reply should contain characters that span several tokens"

    model, c = model_of(runtime), fleet.client
    whole = c.chat.completions.create(model=model, messages=reply(EMOJI_CJK), max_tokens=64)
    assert whole.choices[0].message.content == EMOJI_CJK
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens == len(ids) + 1  # the reply, then EOS

    chunks = list(
        c.chat.completions.create(
            model=model, messages=reply(EMOJI_CJK), max_tokens=64, stream=True
        )
    )
    pieces = deltas(chunks)
    assert "".join(pieces) == EMOJI_CJK
    assert len([p for p in pieces if p]) >= 4, pieces  # it really streamed in parts
    assert not any("\ufffd" in p for p in pieces), pieces
    assert finishes(chunks) == ["stop"]

    # nor in the raw event stream (as a character or as a JSON escape)
    raw = fleet.gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": reply(EMOJI_CJK), "stream": True},
    )
    assert raw.status == 200 and raw.body.count(b"data: ") >= 6, raw
    assert "\ufffd".encode() not in raw.body and b"\\ufffd" not in raw.body.lower(), raw.body

    done = list(c.completions.create(model=model, prompt=f"SIM_REPLY: {EMOJI_CJK}", stream=True))
    texts = [ch.choices[0].text for ch in done if ch.choices]
    assert "".join(texts) == EMOJI_CJK and not any("\ufffd" in t for t in texts), texts


# --- 3. stop strings never leak ------------------------------------------------------------------


def test_stop_string_never_leaks_partially(fleet: Fleet, runtime: str) -> None:
    model, c = model_of(runtime), fleet.client
    kw: dict[str, Any] = dict(model=model, messages=reply(STOP_REPLY), max_tokens=64, stop=[STOP])
    whole = c.chat.completions.create(**kw)
    assert whole.choices[0].message.content == BEFORE_STOP
    assert whole.choices[0].finish_reason == "stop"

    chunks = list(c.chat.completions.create(**kw, stream=True))
    seen = ""
    for piece in deltas(chunks):
        seen += piece
        # every prefix of the stream is a prefix of the answer: nothing of the stop got out
        assert BEFORE_STOP.startswith(seen), (seen, piece)
    assert seen == BEFORE_STOP
    assert finishes(chunks) == ["stop"]

    # completions, and the stop string in `include_stop_str_in_output` form
    out = c.completions.create(
        model=model, prompt=f"SIM_REPLY: {STOP_REPLY}", max_tokens=64, stop=STOP
    )
    assert out.choices[0].text == BEFORE_STOP and out.choices[0].finish_reason == "stop"
    kept = c.chat.completions.create(**kw, extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].message.content == BEFORE_STOP + STOP


# --- 4. n > 1 ------------------------------------------------------------------------------------


def test_n2_gives_two_complete_choices_and_summed_usage(fleet: Fleet, runtime: str) -> None:
    model, c = model_of(runtime), fleet.client
    kw: dict[str, Any] = dict(model=model, messages=MSGS, max_tokens=6, n=2, temperature=1.0)
    whole = c.chat.completions.create(**kw)
    assert [ch.index for ch in whole.choices] == [0, 1]
    texts = [ch.message.content for ch in whole.choices]
    assert all(ch.finish_reason == "length" for ch in whole.choices), whole
    assert all(texts) and texts[0] != texts[1], texts
    assert [fleet.count(model, t) for t in texts] == [6, 6]
    prompt_tokens = len(fleet.tokenize(model, messages=MSGS))
    assert usage_of(whole.usage) == (prompt_tokens, 12, prompt_tokens + 12)

    chunks = list(
        c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    )
    assert {ch.index for chunk in chunks for ch in chunk.choices} == {0, 1}
    for i in (0, 1):
        assert "".join(deltas(chunks, i)) == texts[i]
        assert finishes(chunks, i) == ["length"]
    assert chunks[-1].choices == [] and usage_of(chunks[-1].usage) == usage_of(whole.usage)


# --- 5. a client that goes away aborts the engine's work -----------------------------------------


def test_client_disconnect_mid_stream_aborts_the_engine_request(fleet: Fleet) -> None:
    eng = fleet.slow

    def gone(s: dict[str, int]) -> int:
        return s["aborted"] + s["abort_requests"] + s["cancelled"]

    before = eng.stats()
    stream = fleet.client.chat.completions.create(
        model="grpc-slow",
        messages=MSGS,
        max_tokens=200,
        stream=True,
        extra_body={"ignore_eos": True},  # 200 tokens at 50 ms: a 10 s answer
    )
    it = iter(stream)
    got = "".join(c.choices[0].delta.content or "" for c in (next(it) for _ in range(3)))
    assert got, "no text before the disconnect"
    assert eng.stats()["in_flight"] == 1
    stream.close()

    after = wait_until(
        lambda: (s := eng.stats())["in_flight"] == 0 and gone(s) > gone(before) and s,
        4.0,
        "the engine to drop the abandoned request",
    )
    assert after["completed"] == before["completed"], after  # it did not run to its end
    # The gateway is fine afterwards.
    out = fleet.client.chat.completions.create(model="grpc-slow", messages=MSGS, max_tokens=2)
    assert out.choices[0].message.content


# --- 7. native endpoints, validation -------------------------------------------------------------


def _sse(body: bytes) -> list[Any]:
    events = []
    for line in body.decode().splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_generate_unary_and_stream(fleet: Fleet, runtime: str) -> None:
    model = model_of(runtime)
    body = {
        "model": model,
        "text": "SIM_REPLY: hello 世界",
        "sampling_params": {"max_new_tokens": 32},
    }
    r = fleet.gw.request("POST", "/generate", body)
    assert r.status == 200, r
    out = r.json()
    assert out["text"] == "hello 世界"
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert out["meta_info"]["prompt_tokens"] == len(fleet.tokenize(model, prompt=body["text"]))
    assert out["meta_info"]["completion_tokens"] == len(out["output_ids"])

    r = fleet.gw.request("POST", "/generate", {**body, "stream": True})
    assert r.status == 200, r
    assert (r.header("Content-Type") or "").startswith("text/event-stream")
    events = _sse(r.body)
    assert events[-1] == "[DONE]" and len(events) >= 3, events
    last = events[-2]
    assert last["text"] == out["text"] and last["output_ids"] == out["output_ids"]
    assert last["meta_info"]["finish_reason"]["type"] == "stop"
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-2])

    r = fleet.gw.request(
        "POST",
        "/generate",
        {"model": model, "text": "hi", "sampling_params": {"max_new_tokens": 5}},
    )
    assert r.status == 200, r
    assert r.json()["meta_info"]["finish_reason"]["type"] == "length"
    assert r.json()["meta_info"]["completion_tokens"] == 5


def test_tokenize_detokenize_round_trip(fleet: Fleet) -> None:
    text = "héllo 世界"
    ids = fleet.tokenize("grpc-vllm", prompt=text)
    assert len(ids) >= 3
    r = fleet.gw.request("POST", "/v1/detokenize", {"model": "grpc-sglang", "tokens": ids})
    assert r.status == 200, r
    assert r.json() == {"text": text}

    templated = fleet.tokenize("grpc-vllm", messages=MSGS)
    keep = {"model": "grpc-vllm", "tokens": templated, "skip_special_tokens": False}
    r = fleet.gw.request("POST", "/v1/detokenize", keep)
    assert "<|im_start|>user\n" + MSGS[0]["content"] in r.json()["text"]

    bad = fleet.gw.request("POST", "/v1/detokenize", {"model": "grpc-vllm", "tokens": [-1]})
    assert_openai_error(bad, 400, "invalid_type", "tokens")


CHAT_BAD: list[tuple[dict[str, Any], str, str | None]] = [
    ({"temperature": 5}, "decimal_above_max_value", "temperature"),
    ({"top_p": 0}, "decimal_below_min_value", "top_p"),
    ({"n": 0}, "integer_below_min_value", "n"),
    ({"n": 11}, "integer_above_max_value", "n"),
    ({"max_tokens": 0}, "integer_below_min_value", "max_tokens"),
    ({"top_k": 0}, "invalid_value", "top_k"),
    ({"response_format": {"type": "yaml"}}, "invalid_value", "response_format.type"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "array_above_max_length", "stop"),
    ({"stop": [""]}, "invalid_value", "stop"),
    ({"top_logprobs": 3}, "top_logprobs_requires_logprobs", None),
    ({"logprobs": True, "top_logprobs": 21}, "integer_above_max_value", "top_logprobs"),
    ({"min_tokens": 9, "max_tokens": 4}, "min_tokens_exceeds_max", None),
    ({"logit_bias": {"abc": 1}}, "logit_bias_invalid_key", "logit_bias"),
    (
        {"regex": "a+", "response_format": {"type": "json_object"}},
        "regex_conflicts_with_json",
        None,
    ),
]


@pytest.mark.parametrize(("extra", "code", "param"), CHAT_BAD, ids=lambda v: str(v)[:40])
def test_chat_bad_input_is_400_in_openai_shape(
    fleet: Fleet, extra: dict[str, Any], code: str, param: str | None
) -> None:
    r = fleet.gw.request(
        "POST", "/v1/chat/completions", {"model": "grpc-vllm", "messages": MSGS, **extra}
    )
    assert_openai_error(r, 400, code, param)


def test_other_bad_inputs_and_unknown_model(fleet: Fleet) -> None:
    before = fleet.engines["sglang"].stats()["requests"]
    gw = fleet.gw
    comp = {"model": "grpc-sglang", "prompt": "hi"}
    assert_openai_error(gw.request("POST", "/v1/completions", {**comp, "n": 0}), 400,
                        "integer_below_min_value", "n")  # fmt: skip
    assert_openai_error(gw.request("POST", "/v1/completions", {**comp, "logprobs": 21}), 400,
                        "integer_above_max_value", "logprobs")  # fmt: skip
    assert_openai_error(gw.request("POST", "/v1/completions", {**comp, "temperature": -1}), 400,
                        "decimal_below_min_value", "temperature")  # fmt: skip
    gen = {"model": "grpc-sglang", "text": "hi", "sampling_params": {"temperature": 5}}
    r = gw.request("POST", "/generate", gen)
    assert_openai_error(r, 400, "decimal_above_max_value", "temperature")
    assert fleet.engines["sglang"].stats()["requests"] == before  # nothing reached the engine

    for path, body in (
        ("/v1/chat/completions", {"model": "no-such-model", "messages": MSGS}),
        ("/v1/completions", {"model": "no-such-model", "prompt": "hi"}),
        ("/generate", {"model": "no-such-model", "text": "hi"}),
        ("/v1/tokenize", {"model": "no-such-model", "prompt": "hi"}),
    ):
        assert_openai_error(gw.request("POST", path, body), 404, "model_not_found")
    with pytest.raises(openai.NotFoundError) as info:
        fleet.client.chat.completions.create(model="no-such-model", messages=MSGS)
    assert info.value.code == "model_not_found"


# --- 8. HTTP and gRPC workers behind one gateway -------------------------------------------------


def test_mixed_fleet_serves_http_and_grpc_models(fleet: Fleet) -> None:
    c = fleet.client
    ids = {m.id for m in c.models.list().data}
    assert ids == {"grpc-vllm", "grpc-sglang", "grpc-slow", "http-model"}
    modes = {w["model_id"]: w["connection_mode"] for w in fleet.gw.workers()}
    assert modes["http-model"] == "http" and modes["grpc-vllm"] == "grpc", modes

    http_before = fleet.http_sim.stats()["completed"]
    grpc_before = fleet.engines["vllm"].stats()["completed"]
    for model in ("http-model", "grpc-vllm"):
        out = c.chat.completions.create(model=model, messages=MSGS, max_tokens=4)
        assert out.model == model and out.choices[0].message.content, out
        chunks = list(
            c.chat.completions.create(model=model, messages=MSGS, max_tokens=4, stream=True)
        )
        assert "".join(deltas(chunks)), chunks
    # an engine counts a call completed just after its last message: wait, do not read at once
    wait_until(
        lambda: (
            fleet.http_sim.stats()["completed"] == http_before + 2
            and fleet.engines["vllm"].stats()["completed"] == grpc_before + 2
        ),
        5.0,
        "both calls of each model completed",
    )
