"""HTTPS workers in-process: the HTTP adapter, its health probe and the load poll share one
aiohttp session whose connector carries `WorkerTls.http` (as `Gateway.run` builds it). Against the
simulated worker serving HTTPS with client certificates required: with the right CA and client
certificate all three work; a wrong CA, no client certificate or another host's certificate make
every one of them a connection failure (`UpstreamError("connect")`, a failed probe, a failed
poll), never anything a client would see as a 500."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from support.tls_certs import Pki, make_pki

from smg.actors.load_monitor import make_fetch
from smg.actors.worker import initial_snapshot
from smg.config import CircuitBreakerConfig, SimConfig
from smg.core.circuit_breaker import CircuitBreaker
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.grpc_pool import EnginePool
from smg.pipeline.backends.http import HttpBackend, UpstreamError
from smg.pipeline.backends.http_probe import HttpProber
from smg.sim.http_worker import build_app, start
from smg.tls import ServerTls, WorkerTls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextlib.asynccontextmanager
async def https_sim(pki: Pki, *, wrong_host: bool = False) -> AsyncIterator[WorkerSnapshot]:
    pair = pki.wrong_host if wrong_host else pki.server
    tls = ServerTls.load(str(pair.cert), str(pair.key), str(pki.ca_path))
    assert tls is not None
    runner, port = await start(build_app(SimConfig(model="tls-model")), "127.0.0.1", 0, tls.context)
    try:
        yield initial_snapshot(
            "w1",
            f"https://127.0.0.1:{port}",
            model_id=None,
            worker_type="regular",
            api_key=None,
            breaker=CircuitBreaker(CircuitBreakerConfig()),
        )
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def session_for(tls: WorkerTls) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0, ssl=tls.http)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


BODY = b'{"model": "tls-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'


async def test_requests_probes_and_load_polls_over_mutual_tls(pki: Pki) -> None:
    async with https_sim(pki) as worker, session_for(pki.worker_tls()) as session:
        backend = HttpBackend(session, 10.0)
        probe = await HttpProber(backend, "/health", 5.0)(worker)
        assert probe.ok and probe.model_id == "tls-model"  # /health and /v1/models over TLS
        resp = await backend.open(worker, "/v1/chat/completions", BODY, {})
        async with resp:
            assert resp.status == 200
            assert (await resp.json())["usage"]["completion_tokens"] == 3
        load = await make_fetch(EnginePool(), backend, timeout_s=5.0)(worker)
        assert load.running == 0


@pytest.mark.parametrize("case", ["wrong_ca", "no_client_cert", "wrong_host", "system_store"])
async def test_tls_failures_are_connection_failures(pki: Pki, case: str) -> None:
    tls = {
        "wrong_ca": lambda: pki.worker_tls(ca=pki.other_ca_path),
        "no_client_cert": lambda: pki.worker_tls(cert=False),
        "wrong_host": pki.worker_tls,
        "system_store": WorkerTls.system,  # no flags: the test CA is nobody's root
    }[case]()
    async with https_sim(pki, wrong_host=case == "wrong_host") as worker, session_for(tls) as s:
        backend = HttpBackend(s, 10.0)
        with pytest.raises(UpstreamError) as info:  # before any status line: retryable
            await backend.open(worker, "/v1/chat/completions", BODY, {})
        assert info.value.kind == "connect", info.value
        probe = await HttpProber(backend, "/health", 5.0)(worker)
        assert not probe.ok and probe.detail
        with pytest.raises((aiohttp.ClientError, OSError)):
            await make_fetch(EnginePool(), backend, timeout_s=5.0)(worker)
