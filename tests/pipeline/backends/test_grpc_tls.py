"""gRPC over TLS (`grpcs://`): the lean HTTP/2 client and grpc.aio, in-process.

Against the simulated engine serving TLS with client certificates required (both runtimes): every
RPC the gateway makes (runtime detection, health, model info, loads, the tokenizer download, KV
events, Generate on the lean path and on grpc.aio) works with the right CA and client
certificate; a wrong CA, a missing client certificate, a certificate for another host, or a
plaintext `grpc://` URL fail as connection failures (`UpstreamError("connect")`, health False),
never anything else. The lean client's own TLS connections (a reconnect after GOAWAY keeps TLS, a
server without ALPN h2 is refused) are tested in test_grpc_lean.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.tls_certs import Pki, make_pki

from smg.pipeline.backends.grpc import EngineClient
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineRequest, Finished, SamplingParams
from smg.pipeline.tokenizer_download import fetch_tokenizer
from smg.sim.grpc_engine import GrpcSimConfig, SimEngine, start_server
from smg.sim.tokenizer_files import Vocab, load_vocab, qwen3_tokenizer_dir
from smg.tls import H2, ServerTls, WorkerTls

RUNTIMES = ("vllm", "sglang")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return load_vocab(qwen3_tokenizer_dir())


@contextlib.asynccontextmanager
async def tls_engine(
    vocab: Vocab, pki: Pki, runtime: str = "vllm", *, wrong_host: bool = False
) -> AsyncIterator[int]:
    """A simulated engine serving gRPC over TLS and requiring a client certificate; its port."""
    pair = pki.wrong_host if wrong_host else pki.server
    tls = ServerTls.load(str(pair.cert), str(pair.key), str(pki.ca_path), alpn=H2)
    engine = SimEngine(
        GrpcSimConfig(runtime=runtime, model="tls-model", kv_heartbeat_s=0.05), vocab
    )
    server, _health, port = await start_server(engine, "127.0.0.1", 0, tls)
    try:
        yield port
    finally:
        await server.stop(None)
        engine.close()


def request(rid: str, *, stream: bool) -> EngineRequest:
    return EngineRequest(rid, (1, 2, 3), SamplingParams(max_tokens=5), stream, "hi")


async def generate(client: EngineClient, req: EngineRequest) -> list[Any]:
    return [event async for event in client.generate(req, timeout_s=10)]


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_every_rpc_works_over_mutual_tls(
    vocab: Vocab, pki: Pki, runtime: str, tmp_path: Path
) -> None:
    async with tls_engine(vocab, pki, runtime) as port:
        url = f"grpcs://127.0.0.1:{port}"
        for lean in (True, False):  # Generate on our HTTP/2 client, then on grpc.aio
            client = await EngineClient.connect(url, tls=pki.worker_tls(), lean_generate=lean)
            try:
                assert client.runtime == runtime  # detected with GetModelInfo over TLS
                assert await client.health(5.0) is True
                assert (await client.model_info()).model_id == "tls-model"
                assert (await client.loads())["dp_ranks"] >= 1
                for stream in (True, False):
                    events = await generate(client, request(f"r-{lean}-{stream}", stream=stream))
                    tokens = [t for e in events for t in e.token_ids]
                    assert len(tokens) == 5, events
                    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "length"
            finally:
                await client.close()
        client = await EngineClient.connect(url, runtime=runtime, tls=pki.worker_tls())
        try:  # GetTokenizer, sha256-checked and unpacked
            folder = await fetch_tokenizer(client, tmp_path, timeout_s=30)
            assert (folder / "tokenizer.json").is_file()
            events = client.subscribe_kv_events()  # the data channel: grpc.aio over TLS too
            async with asyncio.timeout(10):
                assert await anext(aiter(events)) is not None
            await events.aclose()
        finally:
            await client.close()


@pytest.mark.parametrize(
    "case", ["wrong_ca", "no_client_cert", "wrong_host", "system_store", "plaintext_url"]
)
async def test_tls_failures_are_connection_failures(vocab: Vocab, pki: Pki, case: str) -> None:
    async with tls_engine(vocab, pki, wrong_host=case == "wrong_host") as port:
        url = f"grpcs://127.0.0.1:{port}"
        tls: WorkerTls | None = pki.worker_tls()
        if case == "wrong_ca":
            tls = pki.worker_tls(ca=pki.other_ca_path)
        elif case == "no_client_cert":
            tls = pki.worker_tls(cert=False)
        elif case == "system_store":
            tls = None  # grpcs:// without flags: the system's store, which lacks the test CA
        elif case == "plaintext_url":
            url = f"grpc://127.0.0.1:{port}"
        with pytest.raises(UpstreamError) as detect:  # runtime detection
            await EngineClient.connect(url, rpc_timeout_s=3, tls=tls)
        assert detect.value.kind == "connect"
        for lean in (True, False):
            client = await EngineClient.connect(
                url, runtime="vllm", rpc_timeout_s=3, tls=tls, lean_generate=lean
            )
            try:
                assert await client.health(3.0) is False
                with pytest.raises(UpstreamError) as info:
                    await generate(client, request("r1", stream=True))
                assert info.value.kind == "connect", info.value
            finally:
                await client.close()
