"""`--dp-aware` over HTTP: the prober reads a server's data-parallel size from SGLang's
`/server_info` (older servers: `/get_server_info`; neither: one rank), and a rank worker
(`url@rank`) reaches its server's URL with `data_parallel_rank` in the JSON body, which the
simulated worker counts per rank. In-process servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import aiohttp
import orjson
import pytest
from aiohttp import web
from support.event_log import worker_snapshot

from smg.config import SimConfig
from smg.core import dp
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.backends.http_probe import HttpProber
from smg.sim.http_worker import build_app, start, worker_of


def test_with_rank_sets_the_field_in_a_json_object() -> None:
    body = orjson.dumps({"model": "m", "data_parallel_rank": 7, "prompt": "hi"})
    assert orjson.loads(dp.with_rank(body, 2)) == {
        "model": "m",
        "data_parallel_rank": 2,
        "prompt": "hi",
    }
    assert orjson.loads(dp.with_rank(b'{"prompt":"x"}', 0)) == {
        "prompt": "x",
        "data_parallel_rank": 0,
    }
    for other in (b"[1, 2]", b"not json", b""):
        assert dp.with_rank(other, 1) == other


@pytest.mark.parametrize(
    ("dp_size", "aware", "expected"), [(3, True, 3), (1, True, 1), (3, False, None)]
)
async def test_the_prober_reads_dp_size(dp_size: int, aware: bool, expected: int | None) -> None:
    runner, port = await start(build_app(SimConfig(model="m", dp_size=dp_size)), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            probe = HttpProber(HttpBackend(session, 5.0), "/health", 5.0, dp_aware=aware)
            w = worker_snapshot("w", None, url=f"http://127.0.0.1:{port}")
            result = await probe(w)
            assert (result.ok, result.model_id, result.dp_size) == (True, "m", expected)
            # known already, or a rank worker: not asked again
            assert (await probe(replace(w, dp_size=3))).dp_size is None
            assert (await probe(replace(w, url=w.url + "@1"))).dp_size is None
    finally:
        await runner.cleanup()


async def test_old_server_info_path_and_none_at_all() -> None:
    """`/get_server_info` when `/server_info` is missing; neither (vLLM): one rank."""

    async def ok(request: web.Request) -> web.Response:
        if request.path == "/v1/models":
            return web.json_response({"data": [{"id": "m"}]})
        return web.json_response({"dp_size": 4} if request.path == "/get_server_info" else {})

    for routes, expected in (
        (("/health", "/v1/models", "/get_server_info"), 4),
        (("/health", "/v1/models"), 1),
    ):
        app = web.Application()
        for path in routes:
            app.router.add_get(path, ok)
        runner, port = await start(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session:
                probe = HttpProber(HttpBackend(session, 5.0), "/health", 5.0, dp_aware=True)
                result = await probe(worker_snapshot("w", None, url=f"http://127.0.0.1:{port}"))
                assert (result.ok, result.dp_size) == (True, expected)
        finally:
            await runner.cleanup()


async def test_a_rank_worker_sends_its_rank_to_its_server() -> None:
    app = build_app(SimConfig(model="m", dp_size=2))
    sim = worker_of(app)
    runner, port = await start(app, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            backend, base = HttpBackend(session, 5.0), f"http://127.0.0.1:{port}"
            body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 2})
            headers = {"Content-Type": "application/json"}
            for url in (f"{base}@1", f"{base}@0", f"{base}@1", base):
                w = worker_snapshot("w", "m", url=url)
                resp = await backend.open(w, "/v1/completions", body, headers)
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["choices"]
            assert sim.stats.dp_ranks == {"1": 2, "0": 1, "-1": 1}
            # control calls (health, loads) of a rank worker go to its server too
            rank1 = worker_snapshot("w", "m", url=f"{base}@1")
            status, _ = await backend.get_json(rank1, "/get_load", 5.0)
            assert status == 200
            # a rank the server does not have: its 400
            bad = orjson.dumps({"model": "m", "prompt": "hi", "data_parallel_rank": 5})
            resp = await backend.open(
                worker_snapshot("w", "m", url=base), "/v1/completions", bad, headers
            )
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "data_parallel_rank"
    finally:
        await runner.cleanup()


async def test_a_rank_workers_load_is_its_ranks() -> None:
    """The sim's `/get_load` has one entry per rank; a rank worker's polled load is its own."""
    from smg.actors.load_monitor import make_fetch
    from smg.pipeline.backends.grpc_pool import EnginePool

    app = build_app(SimConfig(model="m", dp_size=2, first_token_ms=2000))
    runner, port = await start(app, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            backend, base = HttpBackend(session, 5.0), f"http://127.0.0.1:{port}"
            fetch = make_fetch(EnginePool(), backend, timeout_s=5.0)
            body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 1})
            headers = {"Content-Type": "application/json"}
            rank1 = worker_snapshot("w", "m", url=f"{base}@1")
            slow = asyncio.ensure_future(backend.open(rank1, "/v1/completions", body, headers))
            for _ in range(100):
                if (await fetch(rank1)).running == 1:
                    break
                await asyncio.sleep(0.02)
            assert (await fetch(rank1)).running == 1
            assert (await fetch(worker_snapshot("w", "m", url=f"{base}@0"))).running == 0
            assert (await fetch(worker_snapshot("w", "m", url=base))).running == 1  # summed
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow
    finally:
        await runner.cleanup()
