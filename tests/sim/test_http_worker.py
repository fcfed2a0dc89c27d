"""The simulated worker, driven over loopback by the real `openai` SDK and by raw aiohttp."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from smg.config import SimConfig
from smg.errors import invalid_json, invalid_request, missing_field
from smg.sim.http_handlers import SimWorker
from smg.sim.http_worker import build_app, start, worker_of
from smg.sim.text import STREAM_LEN, TextGen, embedding, estimate_tokens, fingerprint, spans

MSGS: list[Any] = [{"role": "user", "content": "Tell me a story about a gateway."}]
# Error codes as smg.errors defines them (the worker answers with those helpers).
NOT_JSON, BAD, MISSING = invalid_json("").code, invalid_request("").code, missing_field("").code


@dataclasses.dataclass
class Sim:
    base: str
    worker: SimWorker
    http: aiohttp.ClientSession
    client: openai.AsyncOpenAI
    sleeps: list[float]

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.http.get(self.base + path) as r:
            raw = await r.read()
            return r.status, orjson.loads(raw) if raw else None

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.http.post(self.base + path, data=data) as r:
            return r.status, orjson.loads(await r.read())


async def _launch(cfg: SimConfig, fake_sleep: bool = False) -> AsyncIterator[Sim]:
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)

    app = build_app(cfg, clock_sleep=record) if fake_sleep else build_app(cfg)
    runner, port = await start(app, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    http_client = openai.DefaultAsyncHttpxClient(verify=False)  # plain HTTP; skips CA loading
    client = openai.AsyncOpenAI(
        base_url=base + "/v1", api_key="x", max_retries=0, http_client=http_client
    )
    try:
        async with aiohttp.ClientSession() as http:
            yield Sim(base, worker_of(app), http, client, sleeps)
    finally:
        await client.close()
        await runner.cleanup()


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async for s in _launch(SimConfig(model="sim-a", seed=7, output_tokens=12)):
        yield s


@pytest.fixture
async def timed() -> AsyncIterator[Sim]:
    cfg = SimConfig(first_token_ms=50, tokens_per_second=100, seed=7)
    async for s in _launch(cfg, fake_sleep=True):
        yield s


# ---- pure generator ------------------------------------------------------------------------


def test_text_is_deterministic_and_seeded() -> None:
    a, b = TextGen(1), TextGen(1)
    crc, _ = fingerprint(["hello"])
    assert a.text(a.offset(crc, None, 0), 20) == b.text(b.offset(crc, None, 0), 20)
    texts = {
        TextGen(1).text(TextGen(1).offset(crc, None, 0), 20),
        TextGen(2).text(TextGen(2).offset(crc, None, 0), 20),
        a.text(a.offset(crc, 5, 0), 20),
        a.text(a.offset(crc, None, 1), 20),
    }
    assert len(texts) == 4
    words = a.words(a.offset(crc, None, 0), 0, 20)
    assert len(words) == 20 and all(w.startswith(" ") and w[1:].isalpha() for w in words)


def test_fingerprint_separates_parts_and_estimate_rounds_up() -> None:
    assert fingerprint(["ab", "c"])[0] != fingerprint(["a", "bc"])[0]
    assert fingerprint(["ab", "c"])[1] == 3
    assert [estimate_tokens(c) for c in (0, 1, 4, 5, 8, 9)] == [1, 1, 1, 2, 2, 3]


def test_spans_wrap_and_cover_long_answers() -> None:
    gen = TextGen(0)
    offset, count = STREAM_LEN - 3, 2 * STREAM_LEN + 10
    pieces = spans(offset, 0, count)
    assert sum(e - b for b, e in pieces) == count
    assert all(0 <= b < STREAM_LEN and e <= 2 * STREAM_LEN for b, e in pieces)
    long = gen.words(offset, 0, count)
    assert long[:STREAM_LEN] == long[STREAM_LEN : 2 * STREAM_LEN]  # the stream is cyclic
    assert gen.words(offset, 5, 7) == long[5:12]


def test_embedding_is_unit_and_keyed() -> None:
    v = embedding(0, 42, 8)
    assert len(v) == 8 and math.isclose(sum(x * x for x in v), 1.0)
    assert v == embedding(0, 42, 8) != embedding(1, 42, 8) != embedding(0, 43, 8)
    assert len(embedding(0, 42, 100)) == 100


# ---- OpenAI endpoints through the SDK --------------------------------------------------------


async def test_chat_non_stream_honours_max_tokens_and_reports_usage(sim: Sim) -> None:
    r = await sim.client.chat.completions.create(model="sim-a", messages=MSGS, max_tokens=5)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "sim-a"
    choice = r.choices[0]
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert len((choice.message.content or "").split()) == 5
    assert r.usage is not None and r.usage.completion_tokens == 5
    assert r.usage.prompt_tokens == estimate_tokens(len("user") + len(MSGS[0]["content"]))
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5

    r = await sim.client.chat.completions.create(model="sim-a", messages=MSGS, n=3)
    assert [c.finish_reason for c in r.choices] == ["stop"] * 3  # no limit: default length
    assert all(len((c.message.content or "").split()) == 12 for c in r.choices)
    assert len({c.message.content for c in r.choices}) == 3
    assert r.usage is not None and r.usage.completion_tokens == 36


async def test_chat_stream_matches_non_stream(sim: Sim) -> None:
    whole = await sim.client.chat.completions.create(
        model="sim-a", messages=MSGS, max_completion_tokens=70, seed=3
    )
    stream = await sim.client.chat.completions.create(
        model="sim-a",
        messages=MSGS,
        max_completion_tokens=70,
        seed=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    first, *tokens, last, usage = chunks
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert len(tokens) == 70 and all(t.choices[0].finish_reason is None for t in tokens)
    text = "".join(t.choices[0].delta.content or "" for t in tokens)
    assert text == whole.choices[0].message.content
    assert last.choices[0].finish_reason == "length"
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.completion_tokens == 70


async def test_same_seed_and_prompt_give_same_text(sim: Sim) -> None:
    async def ask(seed: int | None, content: str = "same prompt") -> str:
        msgs: Any = [{"role": "user", "content": content}]
        r = await sim.client.chat.completions.create(model="sim-a", messages=msgs, seed=seed)
        return r.choices[0].message.content or ""

    assert await ask(11) == await ask(11)
    assert await ask(None) == await ask(None)
    assert len({await ask(11), await ask(12), await ask(11, "other prompt")}) == 3


async def test_completions_stream_and_batch_prompts(sim: Sim) -> None:
    r = await sim.client.completions.create(model="sim-a", prompt=["one", "two"], max_tokens=4, n=2)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert all(len(c.text.split()) == 4 and c.finish_reason == "length" for c in r.choices)
    assert r.usage is not None and r.usage.completion_tokens == 16 and r.usage.prompt_tokens == 2

    whole = await sim.client.completions.create(model="sim-a", prompt="one")
    assert whole.choices[0].text.startswith(r.choices[0].text)  # same prompt, same stream
    stream = await sim.client.completions.create(model="sim-a", prompt="one", stream=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert len(chunks) == 13 and chunks[-1].choices[0].finish_reason == "stop"


async def test_long_stream_crosses_batches_and_the_stream_wrap(sim: Sim) -> None:
    body = {"model": "sim-a", "prompt": [1, 2, 3], "max_tokens": STREAM_LEN + 100, "stream": True}
    async with sim.http.post(sim.base + "/v1/completions", json=body) as r:
        events = (await r.read()).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    payloads = [orjson.loads(e[6:]) for e in events[:-2]]
    assert len(payloads) == STREAM_LEN + 101
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"


async def test_embeddings_shape_and_determinism(sim: Sim) -> None:
    r = await sim.client.embeddings.create(model="sim-a", input=["alpha", "beta"])  # base64 wire
    assert [d.index for d in r.data] == [0, 1] and all(len(d.embedding) == 8 for d in r.data)
    assert r.data[0].embedding != r.data[1].embedding
    status, body = await sim.post("/v1/embeddings", {"input": "alpha", "encoding_format": "float"})
    assert status == 200 and body["object"] == "list" and body["data"][0]["object"] == "embedding"
    assert body["data"][0]["embedding"] == pytest.approx(r.data[0].embedding, abs=1e-6)
    assert body["usage"] == {"prompt_tokens": 2, "total_tokens": 2}


async def test_models_and_discovery_endpoints(sim: Sim) -> None:
    models = [m async for m in sim.client.models.list()]
    assert [(m.id, m.object, m.owned_by) for m in models] == [("sim-a", "model", "smg-sim")]
    assert (await sim.get("/version"))[1]["version"]
    status, info = await sim.get("/get_server_info")
    assert status == 200 and info["model_path"] == info["served_model_name"] == "sim-a"
    assert (await sim.get("/server_info"))[1]["max_total_num_tokens"] > 0
    assert (await sim.get("/get_model_info"))[1]["is_generation"] is True
    status, load = await sim.get("/get_load")
    assert status == 200 and load[0]["num_reqs"] == 0 and "num_waiting_reqs" in load[0]


# ---- failures, health and control ----------------------------------------------------------


async def test_failure_rate_one_answers_500(sim: Sim) -> None:
    assert (await sim.post("/sim/config", {"failure_rate": 1.0}))[0] == 200
    with pytest.raises(openai.InternalServerError) as err:
        await sim.client.chat.completions.create(model="sim-a", messages=MSGS)
    assert err.value.status_code == 500
    status, body = await sim.post("/v1/completions", {"prompt": "x"})
    assert status == 500 and body["error"]["code"] == "sim_injected_failure"
    await sim.post("/sim/config", {"failure_rate": 0.0})
    assert (await sim.post("/v1/completions", {"prompt": "x"}))[0] == 200
    stats = (await sim.get("/sim/stats"))[1]
    assert (stats["requests"], stats["failed"], stats["completed"]) == (3, 2, 1)


async def test_status_override_and_live_config(sim: Sim) -> None:
    status, beh = await sim.post("/sim/config", {"status_override": 503, "output_tokens": 3})
    assert status == 200 and beh["status_override"] == 503
    assert (await sim.post("/v1/completions", {"prompt": "x"}))[0] == 503
    await sim.post("/sim/config", {"status_override": None})
    status, body = await sim.post("/v1/completions", {"prompt": "x"})
    assert status == 200 and body["usage"]["completion_tokens"] == 3
    for bad in ({"failure_rate": 2}, {"nope": 1}, {"status_override": "500"}):
        assert (await sim.post("/sim/config", bad))[0] == 400


async def test_health_toggle(sim: Sim) -> None:
    assert (await sim.get("/health"))[0] == 200
    assert (await sim.post("/sim/health", {"healthy": False})) == (200, {"healthy": False})
    assert (await sim.get("/health"))[0] == 503
    assert (await sim.get("/health_generate"))[0] == 503
    await sim.post("/sim/health", {"healthy": True})
    assert (await sim.get("/health_generate"))[0] == 200


async def test_unhealthy_at_start() -> None:
    async for s in _launch(SimConfig(unhealthy=True)):
        assert (await s.get("/health"))[0] == 503


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/v1/chat/completions", b"{not json", NOT_JSON),
        ("/v1/chat/completions", b"[1, 2]", BAD),
        ("/v1/chat/completions", {"model": "m"}, MISSING),
        ("/v1/chat/completions", {"messages": []}, BAD),
        ("/v1/chat/completions", {"messages": MSGS, "max_tokens": -1}, BAD),
        ("/v1/chat/completions", {"messages": MSGS, "n": 0}, BAD),
        ("/v1/completions", {"model": "m"}, MISSING),
        ("/v1/completions", {"prompt": {"a": 1}}, BAD),
        ("/v1/embeddings", {"model": "m"}, MISSING),
    ],
)
async def test_bad_input_is_400_openai_shape(sim: Sim, path: str, body: Any, code: str) -> None:
    status, answer = await sim.post(path, body)
    assert status == 400 and answer["error"]["code"] == code
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["message"]
    assert sim.worker.stats.failed == 1 and sim.worker.stats.in_flight == 0


async def test_client_abort_cancels_the_stream(sim: Sim) -> None:
    await sim.post("/sim/config", {"tokens_per_second": 200})
    stream = await sim.client.chat.completions.create(
        model="sim-a", messages=MSGS, max_tokens=2000, stream=True
    )
    got = 0
    async for _ in stream:
        got += 1
        if got == 3:
            break
    assert sim.worker.stats.in_flight == 1
    await stream.close()
    for _ in range(200):
        stats = (await sim.get("/sim/stats"))[1]
        if stats["cancelled_streams"]:
            break
        await asyncio.sleep(0.01)
    assert stats["cancelled_streams"] == 1 and stats["in_flight"] == 0
    assert stats["completed"] == 0 and (await sim.get("/get_load"))[1][0]["num_tokens"] == 0


async def test_abort_during_first_token_wait_stops_at_once(sim: Sim) -> None:
    await sim.post("/sim/config", {"first_token_ms": 5000})
    body = {"messages": MSGS, "stream": True}
    with pytest.raises(asyncio.TimeoutError):
        async with asyncio.timeout(0.1):
            await sim.http.post(sim.base + "/v1/chat/completions", json=body)
    for _ in range(100):
        if sim.worker.stats.cancelled_streams:
            break
        await asyncio.sleep(0.01)
    assert sim.worker.stats.cancelled_streams == 1 and sim.worker.stats.in_flight == 0


# ---- timing (injected sleep) -----------------------------------------------------------------


async def test_non_stream_sleeps_once_for_ttft_plus_decode(timed: Sim) -> None:
    status, _ = await timed.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 5})
    assert status == 200 and timed.sleeps == [pytest.approx(0.05 + 4 * 0.01)]


async def test_stream_sleeps_ttft_then_one_gap_per_token(timed: Sim) -> None:
    body = {"prompt": "x", "max_tokens": 5, "stream": True}
    async with timed.http.post(timed.base + "/v1/completions", json=body) as r:
        assert r.status == 200
        await r.read()
    assert timed.sleeps == [pytest.approx(0.05)] + [pytest.approx(0.01)] * 4


async def test_native_generate_answers_in_sglangs_shape(sim: Sim) -> None:
    body = {"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 5}}
    status, out = await sim.post("/generate", body)
    assert status == 200, out
    assert out["meta_info"]["completion_tokens"] == 5
    assert out["meta_info"]["finish_reason"] == {"type": "length"}
    status, by_ids = await sim.post("/generate", {"input_ids": [1, 2, 3]})
    assert status == 200 and by_ids["meta_info"]["prompt_tokens"] == 3
    for bad, param in (({}, "text"), ({"text": "x", "sampling_params": 3}, "sampling_params")):
        status, err = await sim.post("/generate", bad)
        assert status == 400 and err["error"]["code"] == BAD and err["error"]["param"] == param


async def test_slow_health() -> None:
    """`health_delay_ms` delays /health (a slow probe), live-changeable at /sim/config."""
    async for s in _launch(SimConfig(health_delay_ms=300)):
        t0 = asyncio.get_running_loop().time()
        assert (await s.get("/health"))[0] == 200
        assert asyncio.get_running_loop().time() - t0 >= 0.29
        status, beh = await s.post("/sim/config", {"health_delay_ms": 0})
        assert status == 200 and beh["health_delay_ms"] == 0
        assert (await s.post("/sim/config", {"health_delay_ms": -1}))[0] == 400
