"""EngineClient against minimal scripted engines (grpc.aio servers on 127.0.0.1:0) that reproduce
each runtime's quirks: vLLM's per-chunk counts, SGLang's cumulative ones, the final Complete that
repeats the last chunk, interleaved choices, errors, cancellation and the tokenizer download."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import socket
import time
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from smg_grpc_proto.generated import (
    common_pb2,
    sglang_scheduler_pb2,
    sglang_scheduler_pb2_grpc,
    vllm_engine_pb2,
    vllm_engine_pb2_grpc,
)

from smg.pipeline.backends.grpc import EngineClient, EngineError, grpc_target
from smg.pipeline.backends.grpc_contract import SERVICE_NAMES
from smg.pipeline.backends.grpc_replies import ResponseNormaliser
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import (
    EngineEvent,
    EngineRequest,
    Finished,
    SamplingParams,
    TokenDelta,
    TokenLogprob,
)
from smg.pipeline.tokenizer_download import (
    TokenizerDownloadError,
    fetch_tokenizer,
    install_bundle,
)

PB: dict[str, Any] = {"vllm": vllm_engine_pb2, "sglang": sglang_scheduler_pb2}
RUNTIMES = ["vllm", "sglang"]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

# --- scripted engines --------------------------------------------------------------------------


class _Engine:
    """The RPCs both services share, scripted by the test."""

    runtime = ""

    def __init__(self) -> None:
        self.pb = PB[self.runtime]
        self.script: list[Any] = []  # GenerateResponse messages to send
        self.error: tuple[grpc.StatusCode, str] | None = None  # then fail with this status
        self.hang = False  # then wait until the client goes away
        self.requests: list[Any] = []
        self.aborted: list[str] = []
        self.abort_seen = asyncio.Event()
        self.abort_delay_s = 0.0
        self.generate_cancelled = asyncio.Event()
        self.healthy = True
        self.model_info = self.pb.GetModelInfoResponse()
        self.server_info = self.pb.GetServerInfoResponse()
        self.loads = self.pb.GetLoadsResponse()
        self.tokenizer: list[tuple[bytes, str]] = []

    async def Generate(self, request: Any, context: Any) -> AsyncIterator[Any]:
        self.requests.append(request)
        try:
            for response in self.script:
                yield response
            if self.error is not None:
                await context.abort(*self.error)
            if self.hang:
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.generate_cancelled.set()
            raise

    async def HealthCheck(self, request: Any, context: Any) -> Any:
        return self.pb.HealthCheckResponse(healthy=self.healthy)

    async def Abort(self, request: Any, context: Any) -> Any:
        ids = list(request.request_ids) if self.runtime == "vllm" else [request.request_id]
        self.aborted.extend(ids)
        self.abort_seen.set()
        await asyncio.sleep(self.abort_delay_s)
        return self.pb.AbortResponse()

    async def GetModelInfo(self, request: Any, context: Any) -> Any:
        return self.model_info

    async def GetServerInfo(self, request: Any, context: Any) -> Any:
        return self.server_info

    async def GetLoads(self, request: Any, context: Any) -> Any:
        return self.loads

    async def GetTokenizer(self, request: Any, context: Any) -> AsyncIterator[Any]:
        for data, sha in self.tokenizer:
            yield common_pb2.GetTokenizerChunk(data=data, sha256=sha)


class FakeVllm(_Engine, vllm_engine_pb2_grpc.VllmEngineServicer):
    runtime = "vllm"


class FakeSglang(_Engine, sglang_scheduler_pb2_grpc.SglangSchedulerServicer):
    runtime = "sglang"


Serve = Callable[..., Awaitable[tuple[_Engine, str]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[grpc.aio.Server] = []

    async def start(
        runtime: str, *, health_status: dict[str, int] | None = None
    ) -> tuple[_Engine, str]:
        server = grpc.aio.server()
        engine: _Engine
        if runtime == "vllm":
            engine = FakeVllm()
            vllm_engine_pb2_grpc.add_VllmEngineServicer_to_server(engine, server)
        else:
            engine = FakeSglang()
            sglang_scheduler_pb2_grpc.add_SglangSchedulerServicer_to_server(engine, server)
        if health_status is not None:
            servicer = health.aio.HealthServicer()
            for service, status in health_status.items():
                await servicer.set(service, status)
            health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        return engine, f"grpc://127.0.0.1:{port}"

    yield start
    for server in servers:
        await server.stop(None)


@pytest.fixture
async def clients() -> AsyncIterator[list[EngineClient]]:
    opened: list[EngineClient] = []
    yield opened
    for client in opened:
        await client.close()


async def _connect(clients: list[EngineClient], url: str, **kw: Any) -> EngineClient:
    client = await EngineClient.connect(url, **kw)
    clients.append(client)
    return client


# --- replies as each servicer shapes them ------------------------------------------------------


def _lp(rt: str, rows: list[tuple[int, float, list[tuple[int, float]]]]) -> Any:
    pb = PB[rt]
    return pb.OutputLogProbs(
        token_ids=[r[0] for r in rows],
        token_logprobs=[r[1] for r in rows],
        top_logprobs=[
            pb.TopLogProbs(token_ids=[t for t, _ in r[2]], values=[v for _, v in r[2]])
            for r in rows
        ],
    )


def chunk(rt: str, ids: list[int], completion: int, index: int = 0, lp: Any = None) -> Any:
    pb = PB[rt]
    body = pb.GenerateStreamChunk(
        token_ids=ids, prompt_tokens=3, completion_tokens=completion, cached_tokens=1, index=index
    )
    if lp is not None:
        body.output_logprobs.CopyFrom(lp)
    return pb.GenerateResponse(chunk=body)


def complete(
    rt: str,
    ids: list[int],
    completion: int,
    index: int = 0,
    finish: str = "stop",
    matched: int | str | None = None,
    lp: Any = None,
) -> Any:
    pb = PB[rt]
    body = pb.GenerateComplete(
        output_ids=ids,
        finish_reason=finish,
        prompt_tokens=3,
        completion_tokens=completion,
        cached_tokens=1,
        index=index,
    )
    if isinstance(matched, int):
        body.matched_token_id = matched
    elif isinstance(matched, str):
        body.matched_stop_str = matched
    if lp is not None:
        body.output_logprobs.CopyFrom(lp)
    return pb.GenerateResponse(complete=body)


def streamed(rt: str, deltas: list[list[int]], index: int = 0, **kw: Any) -> list[Any]:
    """Chunks then a Complete repeating the last chunk; vLLM counts per chunk (its streaming
    Complete counts that chunk only), SGLang cumulatively."""
    out, total = [], 0
    for ids in deltas:
        total += len(ids)
        out.append(chunk(rt, ids, len(ids) if rt == "vllm" else total, index))
    last = deltas[-1]
    out.append(complete(rt, last, len(last) if rt == "vllm" else total, index, **kw))
    return out


def request(rid: str = "r1", *, stream: bool = True, **sampling: Any) -> EngineRequest:
    return EngineRequest(rid, (1, 2, 3), SamplingParams(**sampling), stream, "hi")


async def collect(client: EngineClient, req: EngineRequest, **kw: Any) -> list[EngineEvent]:
    return [event async for event in client.generate(req, **kw)]


# --- normalisation -----------------------------------------------------------------------------


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_stream_counts_cumulative_and_final_delta_not_repeated(
    serve: Serve, clients: list[EngineClient], rt: str
) -> None:
    engine, url = await serve(rt)
    engine.script = streamed(rt, [[11, 12], [13], [14, 15]])
    client = await _connect(clients, url, runtime=rt)
    events = await collect(client, request())
    assert events == [
        TokenDelta(0, [11, 12], 3, 2, 1),
        TokenDelta(0, [13], 3, 3, 1),
        TokenDelta(0, [14, 15], 3, 5, 1),
        Finished(0, "stop", 3, 5, 1, token_ids=[]),
    ]


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_non_stream_finished_carries_all_ids(
    serve: Serve, clients: list[EngineClient], rt: str
) -> None:
    engine, url = await serve(rt)
    engine.script = [complete(rt, [11, 12, 13], 3, finish="length")]
    client = await _connect(clients, url, runtime=rt)
    events = await collect(client, request(stream=False))
    assert events == [Finished(0, "length", 3, 3, 1, token_ids=[11, 12, 13])]


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_n2_interleaved_indices(serve: Serve, clients: list[EngineClient], rt: str) -> None:
    engine, url = await serve(rt)
    a = streamed(rt, [[1], [2]], index=0)
    b = streamed(rt, [[10, 11], [12]], index=1)
    engine.script = [a[0], b[0], a[1], b[1], a[2], b[2]]
    client = await _connect(clients, url, runtime=rt)
    events = await collect(client, request(n=2))
    assert [(e.index, type(e).__name__, e.completion_tokens) for e in events] == [
        (0, "TokenDelta", 1),
        (1, "TokenDelta", 2),
        (0, "TokenDelta", 2),
        (1, "TokenDelta", 3),
        (0, "Finished", 2),
        (1, "Finished", 3),
    ]
    assert all(e.token_ids == [] for e in events if isinstance(e, Finished))


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_n2_non_stream(serve: Serve, clients: list[EngineClient], rt: str) -> None:
    engine, url = await serve(rt)
    engine.script = [complete(rt, [1, 2], 2, 0), complete(rt, [3], 1, 1, finish="length")]
    client = await _connect(clients, url, runtime=rt)
    events = await collect(client, request(stream=False, n=2))
    assert events == [
        Finished(0, "stop", 3, 2, 1, token_ids=[1, 2]),
        Finished(1, "length", 3, 1, 1, token_ids=[3]),
    ]


@pytest.mark.parametrize(
    ("raw", "ours"),
    [("stop", "stop"), ("length", "length"), ("abort", "abort"), ("", "stop"), ("odd", "stop")],
)
async def test_finish_reasons(
    serve: Serve, clients: list[EngineClient], raw: str, ours: str
) -> None:
    engine, url = await serve("sglang")
    engine.script = streamed("sglang", [[5]], finish=raw)
    client = await _connect(clients, url, runtime="sglang")
    *_, last = await collect(client, request())
    assert isinstance(last, Finished) and (last.finish_reason, last.error) == (ours, None)


async def test_finish_reason_error_names_it(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("vllm")
    engine.script = [complete("vllm", [], 0, finish="error")]
    client = await _connect(clients, url, runtime="vllm")
    (last,) = await collect(client, request(stream=False))
    assert isinstance(last, Finished) and last.finish_reason == "error" and last.error


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("matched", [2, "###"])
async def test_matched_stop(
    serve: Serve, clients: list[EngineClient], rt: str, matched: int | str
) -> None:
    engine, url = await serve(rt)
    engine.script = streamed(rt, [[7], [8]], matched=matched)
    client = await _connect(clients, url, runtime=rt)
    *_, last = await collect(client, request())
    assert isinstance(last, Finished) and last.matched_stop == matched


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_stream_logprobs(serve: Serve, clients: list[EngineClient], rt: str) -> None:
    engine, url = await serve(rt)
    # vLLM lists the sampled token first in its top list; our records are sorted, best first
    first = _lp(rt, [(5, -0.5, [(5, -0.5), (7, -0.2), (8, -1.0)])])
    second = _lp(rt, [(6, -0.1, [(6, -0.1), (9, -2.0), (4, -1.5)])])
    total2 = 1 if rt == "vllm" else 2
    engine.script = [
        chunk(rt, [5], 1, lp=first),
        chunk(rt, [6], total2, lp=second),
        complete(rt, [6], total2, lp=second),  # the repeat, logprobs included
    ]
    client = await _connect(clients, url, runtime=rt)
    events = await collect(client, request(logprobs=2))
    assert isinstance(events[0], TokenDelta) and events[0].logprobs is not None
    (record,) = events[0].logprobs
    assert (record.token_id, record.logprob) == (5, -0.5)
    assert [(t, round(v, 4)) for t, v in record.top] == [(7, -0.2), (5, -0.5), (8, -1.0)]
    assert isinstance(events[1], TokenDelta) and events[1].logprobs is not None
    assert [t for t, _ in events[1].logprobs[0].top] == [6, 4, 9]
    assert isinstance(events[2], Finished) and events[2].logprobs is None
    assert events[2].completion_tokens == 2


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_non_stream_logprobs(serve: Serve, clients: list[EngineClient], rt: str) -> None:
    engine, url = await serve(rt)
    lp = _lp(rt, [(5, -0.5, []), (6, -0.25, [])])
    engine.script = [complete(rt, [5, 6], 2, lp=lp)]
    client = await _connect(clients, url, runtime=rt)
    (done,) = await collect(client, request(stream=False, logprobs=0))
    assert isinstance(done, Finished)
    assert done.logprobs == [TokenLogprob(5, -0.5), TokenLogprob(6, -0.25)]


async def test_wire_request_encoding(serve: Serve, clients: list[EngineClient]) -> None:
    """What reaches each engine for an OpenAI request that left temperature and top_k unset."""
    for rt in RUNTIMES:
        engine, url = await serve(rt)
        engine.script = streamed(rt, [[1]])
        client = await _connect(clients, url, runtime=rt)
        await collect(client, request("wire", max_tokens=8, logprobs=2))
        (sent,) = engine.requests
        assert sent.request_id == "wire" and list(sent.tokenized.input_ids) == [1, 2, 3]
        p = sent.sampling_params
        if rt == "sglang":
            assert (p.temperature, p.top_k, p.max_new_tokens) == (1.0, -1, 8)
            assert (sent.return_logprob, sent.top_logprobs_num) == (True, 2)
        else:
            assert not p.HasField("temperature") and (p.top_k, p.max_tokens) == (0, 8)
            assert p.logprobs == 2


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_error_after_output_finishes_open_choices(
    serve: Serve, clients: list[EngineClient], rt: str
) -> None:
    engine, url = await serve(rt)
    engine.script = [chunk(rt, [1], 1, 0)]
    engine.error = (grpc.StatusCode.INTERNAL, "boom")
    client = await _connect(clients, url, runtime=rt)
    events = await collect(client, request(n=2))
    assert isinstance(events[0], TokenDelta)
    errors = [e for e in events[1:] if isinstance(e, Finished)]
    assert [(e.index, e.finish_reason) for e in errors] == [(0, "error"), (1, "error")]
    assert all(e.error and "boom" in e.error for e in errors)
    assert errors[0].completion_tokens == 1


async def test_stream_ending_without_complete(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("vllm")
    engine.script = [chunk("vllm", [1], 1)]
    client = await _connect(clients, url, runtime="vllm")
    events = await collect(client, request())
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "error"


@pytest.mark.parametrize(
    ("code", "http"),
    [(grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.INTERNAL, 502)],
)
async def test_error_before_output_raises(
    serve: Serve, clients: list[EngineClient], code: grpc.StatusCode, http: int
) -> None:
    engine, url = await serve("sglang")
    engine.error = (code, "prompt too long")
    client = await _connect(clients, url, runtime="sglang")
    with pytest.raises(EngineError) as info:
        await collect(client, request())
    assert (info.value.status, info.value.http_status) == (code.name, http)
    assert "prompt too long" in info.value.detail


async def test_deadline_before_output_is_timeout(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("vllm")
    engine.hang = True
    client = await _connect(clients, url, runtime="vllm")
    with pytest.raises(UpstreamError) as info:
        await collect(client, request("slow"), timeout_s=0.3)
    assert info.value.kind == "timeout"
    await asyncio.wait_for(engine.abort_seen.wait(), 5)  # our deadline: tell the engine
    assert engine.aborted == ["slow"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_connection_refused(clients: list[EngineClient]) -> None:
    url = f"grpc://127.0.0.1:{_free_port()}"
    with pytest.raises(UpstreamError) as info:
        await EngineClient.connect(url, rpc_timeout_s=2)  # detection needs an answer
    assert info.value.kind == "connect"
    client = await _connect(clients, url, runtime="vllm", rpc_timeout_s=2)  # lazy: no call yet
    with pytest.raises(UpstreamError) as info:
        await collect(client, request(), timeout_s=5)
    assert info.value.kind == "connect"
    with pytest.raises(UpstreamError):
        await client.model_info()
    assert await client.health() is False


def test_grpc_target() -> None:
    assert grpc_target("grpc://10.0.0.1:50051/") == "10.0.0.1:50051"
    for bad in ("http://h:1", "grpc://"):
        with pytest.raises(ValueError):
            grpc_target(bad)


# --- cancellation ------------------------------------------------------------------------------


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_cancelled_consumer_cancels_call_and_aborts(
    serve: Serve, clients: list[EngineClient], rt: str
) -> None:
    engine, url = await serve(rt)
    engine.script = [chunk(rt, [1], 1)]
    engine.hang = True
    engine.abort_delay_s = 5.0  # a slow Abort must not hold up the caller's cancellation
    client = await _connect(clients, url, runtime=rt, abort_timeout_s=1.5)
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in client.generate(request("gone")):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the Abort is fire-and-forget: cancelling takes milliseconds, not the Abort's 5 s nor its
    # 1.5 s timeout; the bound leaves room for a loaded box (0.5 s failed once under valgrind)
    assert time.monotonic() - started < 1.2
    await asyncio.wait_for(engine.abort_seen.wait(), 5)
    assert engine.aborted == ["gone"]
    # the engine's own view of the reset (grpc.aio cancels its handler from a completion-queue
    # event): 5 s ran out once in a fresh-clone CI run (1 of 4,239 tests) and never in 15
    # repeats here under two CPU burners, so the wait is generous, not the claim
    await asyncio.wait_for(engine.generate_cancelled.wait(), 15)


async def test_consumer_stopping_early_aborts(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("vllm")
    engine.script = [chunk("vllm", [1], 1)]
    engine.hang = True
    client = await _connect(clients, url, runtime="vllm")
    stream = client.generate(request("early"))
    async for _ in stream:
        break
    await stream.aclose()
    await asyncio.wait_for(engine.abort_seen.wait(), 5)
    assert engine.aborted == ["early"]


async def test_dropped_iterator_aborts(serve: Serve, clients: list[EngineClient]) -> None:
    """No explicit aclose: the event loop's async-generator finaliser still runs the cleanup."""
    engine, url = await serve("sglang")
    engine.script = [chunk("sglang", [1], 1)]
    engine.hang = True
    client = await _connect(clients, url, runtime="sglang")

    async def first_event() -> EngineEvent:
        async for event in client.generate(request("dropped")):
            return event
        raise AssertionError("no event")

    await first_event()
    await asyncio.wait_for(engine.abort_seen.wait(), 5)
    assert engine.aborted == ["dropped"]


async def test_completed_request_sends_no_abort(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("vllm")
    engine.script = streamed("vllm", [[1], [2]])
    client = await EngineClient.connect(url, runtime="vllm")
    async for event in client.generate(request()):
        if isinstance(event, Finished):
            break  # the consumer stops at the last event, before the stream's end
    await client.close()  # waits for any in-flight Abort
    assert engine.aborted == []


async def test_abort_call(serve: Serve, clients: list[EngineClient]) -> None:
    for rt in RUNTIMES:
        engine, url = await serve(rt)
        client = await _connect(clients, url, runtime=rt)
        await client.abort(["a", "b"])
        assert engine.aborted == ["a", "b"]


# --- control plane -----------------------------------------------------------------------------


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_runtime_detection(serve: Serve, clients: list[EngineClient], rt: str) -> None:
    _, url = await serve(rt)
    client = await _connect(clients, url)
    assert client.runtime == rt


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_health_standard_service(serve: Serve, clients: list[EngineClient], rt: str) -> None:
    engine, url = await serve(rt, health_status={SERVICE_NAMES[rt]: SERVING})
    engine.healthy = False  # not asked: the standard service answers
    client = await _connect(clients, url, runtime=rt)
    assert await client.health() is True
    _, url2 = await serve(rt, health_status={SERVICE_NAMES[rt]: NOT_SERVING})
    client2 = await _connect(clients, url2, runtime=rt)
    assert await client2.health() is False


async def test_health_whole_server_status(serve: Serve, clients: list[EngineClient]) -> None:
    """The health service does not know the engine's service name: ask for the server."""
    _, url = await serve("vllm", health_status={"": NOT_SERVING})
    client = await _connect(clients, url, runtime="vllm")
    assert await client.health() is False


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("healthy", [True, False])
async def test_health_falls_back_to_engine_rpc(
    serve: Serve, clients: list[EngineClient], rt: str, healthy: bool
) -> None:
    engine, url = await serve(rt)  # no grpc.health.v1 service: UNIMPLEMENTED
    engine.healthy = healthy
    client = await _connect(clients, url, runtime=rt)
    assert await client.health() is healthy
    assert await client.health() is healthy  # remembered: straight to HealthCheck


async def test_model_info(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("vllm")
    engine.model_info = vllm_engine_pb2.GetModelInfoResponse(
        model_path="/models/llama",
        served_model_name="llama",
        max_context_length=4096,
        eos_token_ids=[2, 7],
        tokenizer_path="/models/llama",
    )
    info = await (await _connect(clients, url)).model_info()
    assert (info.model_id, info.runtime, info.max_context_length) == ("llama", "vllm", 4096)
    assert (info.eos_token_ids, info.served_model_name) == ((2, 7), "llama")

    engine, url = await serve("sglang")
    engine.model_info = sglang_scheduler_pb2.GetModelInfoResponse(model_path="/m/qwen")
    engine.server_info.server_args.update({"context_length": 8192})
    info = await (await _connect(clients, url)).model_info()
    assert (info.model_id, info.max_context_length, info.served_model_name) == (
        "/m/qwen",
        8192,
        None,
    )


async def test_loads(serve: Serve, clients: list[EngineClient]) -> None:
    engine, url = await serve("sglang")
    load = sglang_scheduler_pb2.SchedulerLoad
    engine.loads = sglang_scheduler_pb2.GetLoadsResponse(
        loads=[
            load(num_running_reqs=2, num_waiting_reqs=1, token_usage=0.5, num_used_tokens=100),
            load(num_running_reqs=3, num_waiting_reqs=0, token_usage=0.25, num_used_tokens=50),
        ]
    )
    loads = await (await _connect(clients, url, runtime="sglang")).loads()
    assert loads["dp_ranks"] == 2 and (loads["running"], loads["waiting"]) == (5, 1)
    assert loads["token_usage"] == pytest.approx(0.375) and loads["used_tokens"] == 150


# --- tokenizer download ------------------------------------------------------------------------


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _chunks(data: bytes, sha: str, size: int = 7) -> list[tuple[bytes, str]]:
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    return [(p, sha if i == len(parts) - 1 else "") for i, p in enumerate(parts)]


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


TOKENIZER_FILES = {"tokenizer.json": b'{"model": {}}', "sub/vocab.txt": b"a\nb\n"}


async def test_tokenizer_download_and_reuse(
    serve: Serve, clients: list[EngineClient], tmp_path: Path
) -> None:
    engine, url = await serve("vllm")
    bundle = _zip(TOKENIZER_FILES)
    sha = hashlib.sha256(bundle).hexdigest()
    engine.tokenizer = _chunks(bundle, sha)
    client = await _connect(clients, url, runtime="vllm")
    path = await fetch_tokenizer(client, tmp_path)
    assert path == tmp_path / sha
    assert (path / "tokenizer.json").read_bytes() == TOKENIZER_FILES["tokenizer.json"]
    assert (path / "sub" / "vocab.txt").read_bytes() == b"a\nb\n"
    assert _names(tmp_path) == [sha]  # no staging left behind
    (path / "marker").write_text("kept")
    assert await fetch_tokenizer(client, tmp_path) == path
    assert (path / "marker").read_text() == "kept"  # reused, not unpacked again


async def test_tokenizer_sha_mismatch_writes_nothing(
    serve: Serve, clients: list[EngineClient], tmp_path: Path
) -> None:
    engine, url = await serve("sglang")
    bundle = _zip(TOKENIZER_FILES)
    wrong = "0" * 64
    engine.tokenizer = _chunks(bundle, wrong)
    client = await _connect(clients, url, runtime="sglang")
    with pytest.raises(TokenizerDownloadError) as info:
        await fetch_tokenizer(client, tmp_path / "cache")
    assert wrong in str(info.value) and hashlib.sha256(bundle).hexdigest() in str(info.value)
    assert not (tmp_path / "cache").exists()


async def test_tokenizer_without_sha_is_refused(
    serve: Serve, clients: list[EngineClient], tmp_path: Path
) -> None:
    engine, url = await serve("vllm")
    engine.tokenizer = _chunks(_zip(TOKENIZER_FILES), "")
    client = await _connect(clients, url, runtime="vllm")
    with pytest.raises(TokenizerDownloadError, match="sha256"):
        await fetch_tokenizer(client, tmp_path)


@pytest.mark.parametrize("name", ["../evil.txt", "/abs.txt", "a/../../evil.txt", "C:/x.txt"])
def test_unsafe_zip_refused(tmp_path: Path, name: str) -> None:
    bundle = _zip({"ok.txt": b"x", name: b"evil"})
    with pytest.raises(TokenizerDownloadError, match="unsafe path"):
        install_bundle(bundle, hashlib.sha256(bundle).hexdigest(), tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "evil.txt").exists()


def test_not_a_zip_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenizerDownloadError, match="not a zip"):
        install_bundle(b"garbage", "f" * 64, tmp_path)


# --- the normaliser alone (pure) ---------------------------------------------------------------


@pytest.mark.parametrize("rt", RUNTIMES)
def test_complete_variants_never_duplicate(rt: str) -> None:
    cum = rt == "sglang"
    cases = [
        ([1, 2, 3], [], 3),  # a Complete with every id (a cumulative servicer): nothing new
        ([1, 2, 3, 4], [4], 4),  # cumulative with an unseen tail: the tail only
        ([], [], 3),  # an empty Complete
    ]
    for final_ids, expected_ids, expected_count in cases:
        norm = ResponseNormaliser(rt, stream=True, n=1)
        norm.feed(chunk(rt, [1, 2], 2))
        norm.feed(chunk(rt, [3], 3 if cum else 1))
        reported = len(final_ids) if cum else len(final_ids[-1:])
        done = norm.feed(complete(rt, final_ids, max(reported, 3) if cum else reported))
        assert isinstance(done, Finished)
        assert (done.token_ids, done.completion_tokens) == (expected_ids, expected_count)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_complete_with_tokens_never_streamed(rt: str) -> None:
    norm = ResponseNormaliser(rt, stream=True, n=1)
    done = norm.feed(complete(rt, [8, 9], 2))
    assert isinstance(done, Finished) and (done.token_ids, done.completion_tokens) == ([8, 9], 2)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_chunk_delta_has_every_field(rt: str) -> None:
    """(`feed_all` builds a plain chunk's TokenDelta field by field, not through __init__.)"""
    norm = ResponseNormaliser(rt, stream=True, n=1, logprobs=False)
    delta = norm.feed(chunk(rt, [5, 6], 2))
    assert type(delta) is TokenDelta
    assert dataclasses.replace(delta) == delta  # every field read (an unset slot raises)
    assert (delta.index, delta.token_ids, delta.completion_tokens, delta.logprobs) == (
        0,
        [5, 6],
        2,
        None,
    )


def test_normaliser_ignores_repeats_and_empty_chunks() -> None:
    norm = ResponseNormaliser("sglang", stream=True, n=2)
    assert norm.feed(chunk("sglang", [], 0)) is None  # e.g. a prefill-only report
    assert norm.feed(complete("sglang", [], 0)) is not None
    assert norm.feed(complete("sglang", [], 0)) is None  # a second Complete for index 0
    assert norm.feed(chunk("sglang", [4], 1)) is None  # output after the end
    assert not norm.all_finished
    (failed,) = norm.fail("gone")
    assert (failed.index, failed.finish_reason, failed.error) == (1, "error", "gone")
    assert norm.all_finished and norm.fail("again") == []


# --- the lean data path and its grpc.aio fallback ----------------------------------------------


@pytest.mark.parametrize("rt", RUNTIMES)
async def test_lean_and_grpcio_generate_agree(
    serve: Serve, clients: list[EngineClient], rt: str
) -> None:
    engine, url = await serve(rt)
    engine.script = streamed(rt, [[1], [2, 3], [4]], matched=7)
    lean = await _connect(clients, url, runtime=rt)
    plain = await _connect(clients, url, runtime=rt, lean_generate=False)
    for req in (request(), request(stream=False), request(n=2)):
        assert await collect(lean, req) == await collect(plain, req)
    batches = [b async for b in lean.generate_batches(request())]
    assert all(batches) and [e for b in batches for e in b] == await collect(plain, request())


@pytest.mark.parametrize(
    ("code", "kind"),
    [(grpc.StatusCode.INVALID_ARGUMENT, EngineError), (grpc.StatusCode.UNAVAILABLE, UpstreamError)],
)
async def test_grpcio_fallback_classifies_errors(
    serve: Serve, clients: list[EngineClient], code: grpc.StatusCode, kind: type[Exception]
) -> None:
    engine, url = await serve("vllm")
    engine.error = (code, "nope")
    client = await _connect(clients, url, runtime="vllm", lean_generate=False)
    with pytest.raises(kind):
        await collect(client, request())


# --- bounds on what an engine sends back (issue 10, finding 14) --------------------------------


async def test_a_silent_stream_is_cut_by_the_idle_sweeper(
    serve: Serve, clients: list[EngineClient]
) -> None:
    from smg.core.idle import TICKS, IdleSweeper

    engine, url = await serve("vllm")
    engine.script = [chunk("vllm", [1], 1)]
    engine.hang = True  # then silence
    sweeper = IdleSweeper(1.0)
    client = await _connect(clients, url, runtime="vllm", idle=sweeper)
    events: list[EngineEvent] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for event in client.generate(request("silent")):
            events.append(event)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    assert len(sweeper) == 1
    await asyncio.sleep(0.05)  # the consumer is back waiting on the engine
    for _ in range(TICKS + 1):  # the first tick notes the token, then a whole idle limit
        sweeper.tick()  # without a message: the call is cut
    await asyncio.wait_for(task, 5)
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "error"
    assert "idle" in (events[-1].error or "")
    assert len(sweeper) == 0  # released
    await asyncio.wait_for(engine.abort_seen.wait(), 5)
    assert engine.aborted == ["silent"]


async def test_a_non_streamed_call_is_not_under_the_idle_limit(
    serve: Serve, clients: list[EngineClient]
) -> None:
    from smg.core.idle import IdleSweeper

    engine, url = await serve("vllm")
    engine.script = [complete("vllm", [1, 2], 2)]
    sweeper = IdleSweeper(1.0)
    client = await _connect(clients, url, runtime="vllm", idle=sweeper)
    events = await collect(client, request("whole", stream=False))
    assert [type(e) for e in events] == [Finished] and events[0].finish_reason == "stop"
    assert len(sweeper) == 0


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_past_the_size_cap_is_cut(
    serve: Serve, clients: list[EngineClient], stream: bool
) -> None:
    engine, url = await serve("sglang")
    engine.script = [chunk("sglang", [7] * 50, 50 * (i + 1)) for i in range(100)]
    engine.hang = True  # an engine that would go on and on
    client = await _connect(clients, url, runtime="sglang", max_response_bytes=2000)
    events = await asyncio.wait_for(collect(client, request("big", stream=stream)), 10)
    last = events[-1]
    assert isinstance(last, Finished) and last.finish_reason == "error"
    assert "exceeded 2000 bytes" in (last.error or "")
    delivered = sum(len(e.token_ids) for e in events)
    assert delivered < 2000  # cut near the cap, not after the hundred chunks
    await asyncio.wait_for(engine.abort_seen.wait(), 5)


async def test_a_consumer_busy_with_a_batch_does_not_make_the_engine_idle(
    serve: Serve, clients: list[EngineClient]
) -> None:
    from smg.core.idle import TICKS, IdleSweeper

    engine, url = await serve("vllm")
    engine.script = streamed("vllm", [[1], [2]], finish="length")
    sweeper = IdleSweeper(1.0)
    client = await _connect(clients, url, runtime="vllm", idle=sweeper)
    events: list[EngineEvent] = []
    async for event in client.generate(request("slow-client")):
        if not events:  # the consumer holds the first batch for many idle limits
            for _ in range(10 * TICKS):
                sweeper.tick()
        events.append(event)
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "length"
