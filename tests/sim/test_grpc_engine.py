"""The simulated gRPC engine in-process, driven through the generated stubs of both runtimes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sgl
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as sgl_grpc
from smg_grpc_proto.generated import vllm_engine_pb2 as vll
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as vll_grpc

from smg.sim import script as sc
from smg.sim.engine_core import CoreConfig
from smg.sim.grpc_cli import add_grpc_sim_args, config_from_args
from smg.sim.grpc_engine import (
    REALISTIC,
    SERVICE_NAMES,
    GrpcSimConfig,
    SimEngine,
    fetch_stats,
    start_server,
)
from smg.sim.tokenizer_files import Vocab, load_vocab, qwen3_tokenizer_dir

RUNTIMES = ("vllm", "sglang")
SLOW = CoreConfig(decode_ms_per_token=20)  # long enough to abort or cancel mid-stream


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return load_vocab(qwen3_tokenizer_dir())


@dataclass
class Sim:
    engine: SimEngine
    channel: Any
    stub: Any
    runtime: str
    vocab: Vocab

    def chat(self, text: str) -> list[int]:
        rendered = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        return self.vocab.tokenizer.encode(rendered, add_special_tokens=False).ids

    def request(self, ids: list[int], *, rid: str = "r1", stream: bool = True, **sp: Any) -> Any:
        logprobs = sp.pop("logprobs", None)
        if self.runtime == "vllm":
            if logprobs is not None:
                sp["logprobs"] = logprobs
            return vll.GenerateRequest(
                request_id=rid,
                tokenized=vll.TokenizedInput(input_ids=ids),
                sampling_params=vll.SamplingParams(**sp),
                stream=stream,
            )
        renames = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}
        sp = {renames.get(k, k): v for k, v in sp.items()}
        sp.setdefault("temperature", 1.0)
        return sgl.GenerateRequest(
            request_id=rid,
            tokenized=sgl.TokenizedInput(input_ids=ids),
            sampling_params=sgl.SamplingParams(top_p=1.0, top_k=-1, **sp),
            stream=stream,
            return_logprob=logprobs is not None,
            top_logprobs_num=logprobs or 0,
        )

    async def generate(self, ids: list[int], **kw: Any) -> list[Any]:
        return [r async for r in self.stub.Generate(self.request(ids, **kw))]

    def text(self, ids: Any) -> str:
        return self.vocab.tokenizer.decode(list(ids), skip_special_tokens=True)


@contextlib.asynccontextmanager
async def running(vocab: Vocab, runtime: str, **changes: Any) -> AsyncIterator[Sim]:
    engine = SimEngine(GrpcSimConfig(runtime=runtime, **changes), vocab)
    server, _health, port = await start_server(engine, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub_type = vll_grpc.VllmEngineStub if runtime == "vllm" else sgl_grpc.SglangSchedulerStub
    try:
        yield Sim(engine, channel, stub_type(channel), runtime, vocab)
    finally:
        await channel.close()
        await server.stop(None)
        engine.close()


def split(responses: list[Any]) -> tuple[list[Any], list[Any]]:
    chunks = [r.chunk for r in responses if r.WhichOneof("response") == "chunk"]
    completes = [r.complete for r in responses if r.WhichOneof("response") == "complete"]
    return chunks, completes


# ---------------------------------------------------------------- Generate


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_stream_counts_and_repeated_final_delta(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime) as sim:
        ids = sim.chat("Tell me a story.")
        chunks, (done,) = split(await sim.generate(ids, max_tokens=60, ignore_eos=True))
        streamed = [t for c in chunks for t in c.token_ids]
        assert len(streamed) == 60 and len(chunks) == 8  # up to 8 tokens per chunk
        assert list(done.output_ids) == list(chunks[-1].token_ids)  # the last delta, again
        assert done.finish_reason == "length" and done.prompt_tokens == len(ids)
        if runtime == "vllm":  # per chunk
            assert [c.completion_tokens for c in chunks] == [len(c.token_ids) for c in chunks]
            assert done.completion_tokens == len(done.output_ids)
        else:  # cumulative
            sizes = [len(c.token_ids) for c in chunks]
            assert [c.completion_tokens for c in chunks] == [
                sum(sizes[: i + 1]) for i in range(len(sizes))
            ]
            assert done.completion_tokens == 60
        (whole,) = split(await sim.generate(ids, stream=False, max_tokens=60, ignore_eos=True))[1]
        assert list(whole.output_ids) == streamed and whole.completion_tokens == 60


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_default_output_is_words_then_eos(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime, seed=7) as sim:
        ids = sim.chat("hi")
        (done,) = split(await sim.generate(ids, stream=False, max_tokens=1000, temperature=0.7))[1]
        out = list(done.output_ids)
        assert done.finish_reason == "stop" and out[-1] == vocab.eos_ids[0]
        assert sc.NATURAL_MIN < len(out) <= sc.NATURAL_MAX
        assert set(out[:-1]) <= set(vocab.words)
        again = split(await sim.generate(ids, stream=False, max_tokens=1000, temperature=0.7))
        assert list(again[1][0].output_ids) == out  # deterministic
        if runtime == "sglang":
            assert done.matched_token_id == vocab.eos_ids[0]
        else:
            assert done.WhichOneof("matched_stop") is None  # vLLM: EOS has no stop_reason


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_scripted_reply_is_exact_and_emoji_spans_tokens(vocab: Vocab, runtime: str) -> None:
    reply = '<think>\nhmm\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    script = sc.Script((sc.ScriptRule("weather?", reply),))
    async with running(vocab, runtime, script=script) as sim:
        chunks, (done,) = split(await sim.generate(sim.chat("What is the weather?")))
        out = [t for c in chunks for t in c.token_ids]
        assert out[-1] == vocab.eos_ids[0] and done.finish_reason == "stop"
        assert sim.vocab.tokenizer.decode(out[:-1], skip_special_tokens=False) == reply
        emoji = "Flamingo 🦩 says 你好 👍🏽"
        chunks, _ = split(await sim.generate(sim.chat(f"SIM_REPLY: {emoji}")))
        out = [t for c in chunks for t in c.token_ids][:-1]
        assert sim.text(out) == emoji
        partial = [t for t in out if not _valid_utf8(vocab.table[t])]
        assert len(partial) >= 2  # 🦩 (and 👍🏽) come out split across tokens


def _valid_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_finish_reasons(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime) as sim:
        ids = sim.chat("SIM_REPLY: alpha beta gamma delta epsilon")
        beta = vocab.tokenizer.encode(" beta").ids[0]
        (done,) = split(await sim.generate(ids, stream=False, stop_token_ids=[beta]))[1]
        assert (done.finish_reason, done.matched_token_id) == ("stop", beta)
        assert done.output_ids[-1] == beta
        (done,) = split(await sim.generate(ids, stream=False, stop=["gam"]))[1]
        assert (done.finish_reason, done.matched_stop_str) == ("stop", "gam")
        assert sim.text(done.output_ids).endswith(" gamma")  # ids end with the matching token
        (done,) = split(await sim.generate(ids, stream=False, max_tokens=2))[1]
        assert (done.finish_reason, len(done.output_ids)) == ("length", 2)
        (done,) = split(await sim.generate(ids, stream=False, max_tokens=6))[1]
        assert done.finish_reason == "length"  # EOS at the last allowed token: length wins
        (done,) = split(await sim.generate(ids, stream=False, min_tokens=12, max_tokens=40))[1]
        assert len(done.output_ids) == 13 and done.finish_reason == "stop"


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_n2_choices_carry_indices(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime) as sim:
        ids = sim.chat("two please")
        chunks, completes = split(await sim.generate(ids, n=2, max_tokens=30, temperature=1.0))
        assert {c.index for c in chunks} == {0, 1}
        assert sorted(c.index for c in completes) == [0, 1]
        per = [[t for c in chunks if c.index == i for t in c.token_ids] for i in (0, 1)]
        assert per[0] != per[1]
        _, greedy = split(await sim.generate(ids, n=2, max_tokens=30, temperature=0.0))
        assert greedy[0].output_ids == greedy[1].output_ids


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_logprobs_are_well_formed(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime) as sim:
        ids = sim.chat("SIM_REPLY: one two three four five six seven eight nine ten")
        chunks, (done,) = split(await sim.generate(ids, logprobs=3))
        for c in chunks:
            lp = c.output_logprobs
            assert list(lp.token_ids) == list(c.token_ids)
            assert all(v < 0 for v in lp.token_logprobs)
            assert [top.token_ids[0] for top in lp.top_logprobs] == list(c.token_ids)
            assert all(len(top.values) == 3 for top in lp.top_logprobs)
            assert all(list(t.values) == sorted(t.values, reverse=True) for t in lp.top_logprobs)
        total = sum(len(c.token_ids) for c in chunks)
        expected = len(chunks[-1].token_ids) if runtime == "vllm" else total
        assert len(done.output_logprobs.token_ids) == expected


async def test_runtime_specific_refusals(vocab: Vocab) -> None:
    async with running(vocab, "vllm") as sim:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await sim.generate(sim.chat("x"), max_tokens=0)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    async with running(vocab, "sglang") as sim:
        bad = sgl.GenerateRequest(
            request_id="r",
            tokenized=sgl.TokenizedInput(input_ids=sim.chat("x")),
            sampling_params=sgl.SamplingParams(temperature=0.5),  # proto3 zeros: top_p 0
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [r async for r in sim.stub.Generate(bad)]
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "top_p" in (err.value.details() or "")
        (done,) = split(await sim.generate(sim.chat("x"), stream=False, max_tokens=0))[1]
        assert (done.finish_reason, len(done.output_ids)) == ("length", 0)
        assert sim.engine.stats.rejected == 1


# ---------------------------------------------------------------- abort and cancel


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_abort_is_counted(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime, core=SLOW) as sim:
        call = sim.stub.Generate(sim.request(sim.chat("long"), rid="job-1", max_tokens=500))
        first = await call.read()
        assert first.chunk.token_ids
        if runtime == "vllm":
            await sim.stub.Abort(vll.AbortRequest(request_ids=["job-1", "nope"]))
        else:
            answer = await sim.stub.Abort(sgl.AbortRequest(request_id="job-1"))
            assert answer.success
        rest = [first]
        while (msg := await call.read()) is not grpc.aio.EOF:
            rest.append(msg)
        assert rest[-1].complete.finish_reason == "abort"
        stats = await fetch_stats(sim.channel, runtime)
        assert stats["aborted"] == 1 and stats["in_flight"] == 0 and stats["cancelled"] == 0
        assert stats["abort_requests"] == (2 if runtime == "vllm" else 1)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_client_cancel_is_counted(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime, core=SLOW) as sim:
        call = sim.stub.Generate(sim.request(sim.chat("long"), max_tokens=500))
        await call.read()
        call.cancel()
        for _ in range(200):
            if sim.engine.stats.cancelled:
                break
            await asyncio.sleep(0.005)
        assert sim.engine.stats.snapshot() == {
            "requests": 1, "completed": 0, "aborted": 0, "abort_requests": 0,
            "cancelled": 1, "rejected": 0, "in_flight": 0, "pd_requests": 0,
            "last_bootstrap_port": 0, "embed_requests": 0, "lora_requests": 0,
            "last_traceparent": "", "dp_ranks": {"-1": 1},
        }  # fmt: skip
        assert sim.engine.load().running == 0


# ---------------------------------------------------------------- other RPCs


@pytest.mark.parametrize("corrupt", [False, True])
async def test_get_tokenizer_zip_and_sha(vocab: Vocab, corrupt: bool) -> None:
    async with running(vocab, "vllm", corrupt_tokenizer_sha=corrupt) as sim:
        chunks = [c async for c in sim.stub.GetTokenizer(common_pb2.GetTokenizerRequest())]
        assert len(chunks) > 1 and all(not c.sha256 for c in chunks[:-1])
        data = b"".join(c.data for c in chunks)
        assert (chunks[-1].sha256 == hashlib.sha256(data).hexdigest()) is not corrupt
        names = zipfile.ZipFile(io.BytesIO(data)).namelist()
        assert {"tokenizer.json", "tokenizer_config.json"} <= set(names)


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_kv_events_and_prefix_cache_hits(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime, kv_heartbeat_s=0.02) as sim:
        request = common_pb2.SubscribeKvEventsRequest(load_records_before_first_batch=True)
        events = sim.stub.SubscribeKvEvents(request)
        hello = await events.read()
        assert (hello.sequence_number, hello.load.load_only) == (0, True)
        ids = sim.chat("a prompt comfortably longer than sixteen tokens, to fill a few blocks")
        (first,) = split(await sim.generate(ids, stream=False, max_tokens=4, ignore_eos=True))[1]
        assert first.cached_tokens == 0
        batch = await events.read()
        while not batch.events:
            batch = await events.read()
        assert batch.sequence_number == 1 and not batch.load.load_only
        stored = batch.events[0].stored
        assert list(stored.blocks[0].token_ids) == ids[:16] and stored.blocks[0].block_size == 16
        assert not stored.HasField("parent_block_hash")
        (again,) = split(await sim.generate(ids, stream=False, max_tokens=4, ignore_eos=True))[1]
        assert again.cached_tokens == (len(ids) - 1) // 16 * 16 > 0
        beat = await events.read()  # the idle heartbeat repeats the last sequence sent
        while beat.events:
            beat = await events.read()
        assert beat.load.load_only and beat.sequence_number >= 1
        events.cancel()
        resumed = sim.stub.SubscribeKvEvents(
            common_pb2.SubscribeKvEventsRequest(start_sequence_number=1)
        )
        replay = await resumed.read()
        assert replay.sequence_number == 1 and replay.events[0] == batch.events[0]
        assert (await sim.stub.FlushCache(common_pb2.FlushCacheRequest())).success
        cleared = await resumed.read()
        while not cleared.events or not cleared.events[0].HasField("cleared"):
            cleared = await resumed.read()
        resumed.cancel()


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_health_and_info_rpcs(vocab: Vocab, runtime: str) -> None:
    async with running(vocab, runtime, model="qwen3-sim") as sim:
        health = health_pb2_grpc.HealthStub(sim.channel)
        for service in ("", SERVICE_NAMES[runtime]):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        pb = vll if runtime == "vllm" else sgl
        assert (await sim.stub.HealthCheck(pb.HealthCheckRequest())).healthy
        info = await sim.stub.GetModelInfo(pb.GetModelInfoRequest())
        assert (info.served_model_name, info.model_type) == ("qwen3-sim", "qwen3")
        assert list(info.eos_token_ids) == [151645] and info.vocab_size == vocab.vocab_size
        assert info.max_context_length == 32768 and info.tokenizer_path
        server = await sim.stub.GetServerInfo(pb.GetServerInfoRequest())
        assert server.server_type == ("vllm-grpc" if runtime == "vllm" else "grpc")
        if runtime == "sglang":
            assert server.scheduler_info["sim_stats"]["requests"] == 0
        loads = await sim.stub.GetLoads(pb.GetLoadsRequest(include=["all"]))
        assert loads.dp_rank_count == 1 and loads.loads[0].max_running_requests == 1024
        assert loads.loads[0].max_total_num_tokens == CoreConfig().kv_capacity_tokens


# ---------------------------------------------------------------- pure pieces and CLI


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, (5, "stop", None)),  # 4 words + EOS
        ({"eos_reports_match": True}, (5, "stop", 0)),
        ({"max_tokens": 5}, (5, "length", None)),  # EOS is the 5th token: length first
        ({"max_tokens": 3}, (3, "length", None)),
        ({"ignore_eos": True, "max_tokens": 9}, (9, "length", None)),
        ({"min_tokens": 6}, (7, "stop", None)),  # EOS held back until 6 tokens
        ({"stop_token_ids": frozenset({2})}, (2, "stop", 2)),
        ({"stop_token_ids": frozenset({2}), "min_tokens": 3}, (5, "stop", None)),
        ({"stop": ("CD",)}, (4, "stop", "CD")),  # "C" + "D" complete at the 4th token
    ],
)
def test_finish_rules(kw: dict[str, Any], expected: tuple[int, str, Any]) -> None:
    table = (b"<eos>", b"A", b"B", b"C", b"D", b"E")
    words = sc.WordStream(0, (5,))
    rule = sc.StopRule(**{"max_tokens": 100, "eos_ids": frozenset({0}), **kw})
    out = sc.finish((1, 2, 3, 4), words, 0, rule, table)
    matched = out.matched_token_id if out.matched_stop_str is None else out.matched_stop_str
    assert (len(out.token_ids), out.finish_reason, matched) == expected


def test_script_rules_and_magic() -> None:
    script = sc.parse_script('[{"when": "weather", "reply": "Sunny."}]')
    assert script.reply_for("what's the weather like") == "Sunny."
    chat = "<|im_start|>user\nSIM_REPLY: old<|im_end|>\n<|im_start|>user\nSIM_REPLY: new!<|im_end|>"
    assert script.reply_for(chat) == "new!"
    assert script.reply_for("<|im_start|>user\nweather SIM_REPLY:x<|im_end|>") == "x"
    assert script.reply_for("nothing") is None
    with pytest.raises(ValueError):
        sc.parse_script('[{"when": "", "reply": "x"}]')


def test_cli_flags() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", dest="sim.port", type=int, default=8000)  # the HTTP sim's
    add_grpc_sim_args(parser)
    cfg = config_from_args(
        parser.parse_args(["--runtime", "sglang", "--realistic", "--max-batch", "4"])
    )
    assert (cfg.runtime, cfg.port, cfg.core.max_batch) == ("sglang", 8000, 4)
    assert cfg.core.decode_ms_per_token == REALISTIC.decode_ms_per_token
    plain = argparse.ArgumentParser()
    add_grpc_sim_args(plain)
    cfg = config_from_args(plain.parse_args(["--corrupt-tokenizer-sha", "--block-size", "32"]))
    assert cfg.corrupt_tokenizer_sha and cfg.core.block_size == 32 and cfg.port == 50051
    assert cfg.core.prefill_tokens_per_s == 0 and cfg.core.decode_ms_per_token == 0


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_the_last_traceparent_is_recorded(vocab: Vocab, runtime: str) -> None:
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with running(vocab, runtime) as sim:
        call = sim.stub.Generate(
            sim.request(sim.chat("hi"), max_tokens=2), metadata=(("traceparent", header),)
        )
        while await call.read() is not grpc.aio.EOF:
            pass
        assert sim.engine.stats.last_traceparent == header
        call = sim.stub.Generate(sim.request(sim.chat("hi"), max_tokens=2))
        while await call.read() is not grpc.aio.EOF:
            pass
        assert sim.engine.stats.last_traceparent == ""  # the last call carried none
