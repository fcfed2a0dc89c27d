"""What an HTTP worker serves: every id of its /v1/models (the model, then LoRA adapters), each
routable (indexed in the registry snapshot under every id)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from support.event_log import worker_snapshot

from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, WorkerSnapshot
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.backends.http_probe import HttpProber
from smg.pipeline.providers.openai import model_ids
from smg.sim.http_worker import start


@pytest.mark.parametrize(
    ("data", "ids"),
    [
        ({"object": "list", "data": [{"id": "base"}, {"id": "lora-a"}, {"id": "lora-b"}]},
         ("base", "lora-a", "lora-b")),
        ({"data": [{"id": "m"}, {"id": "m"}, {"id": ""}, {"id": 3}, "x", {}]}, ("m",)),
        ({"data": []}, ()),
        ({"data": {"id": "m"}}, ()),
        ([{"id": "m"}], ()),
        (None, ()),
    ],
)  # fmt: skip
def test_model_ids(data: Any, ids: tuple[str, ...]) -> None:
    assert model_ids(data) == ids


def worker(wid: str, model: str | None, adapters: tuple[str, ...] = ()) -> WorkerSnapshot:
    return replace(worker_snapshot(wid, model), health=HealthStatus.READY, adapters=adapters)


def test_a_worker_is_indexed_under_its_model_and_each_adapter() -> None:
    a = worker("a", "base", ("sql", "chat"))
    b = worker("b", "base", ("sql",))
    c = worker("c", None, ("ignored",))  # no model learned yet: not routable by any id
    snap = RegistrySnapshot.build((a, b, c))
    assert snap.by_model == {"base": (a, b), "sql": (a, b), "chat": (a,)}
    assert snap.models() == ["base", "sql", "chat"]


async def test_the_prober_learns_the_model_and_follows_the_adapters() -> None:
    """A worker whose /v1/models lists adapters: learned at the first check, followed at every
    check after (one unloaded: gone), and kept while the list cannot be read."""
    listing: dict[str, Any] = {"status": 200, "ids": ["base", "sql", "chat"]}

    async def models(request: web.Request) -> web.Response:
        data = {"object": "list", "data": [{"id": i} for i in listing["ids"]]}
        return web.json_response(data, status=listing["status"])

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    runner, port = await start(app, "127.0.0.1", 0, None)
    try:
        async with aiohttp.ClientSession() as session:
            probe = HttpProber(HttpBackend(session, 5.0), "/health", 5.0)
            w = worker_snapshot("w", None, url=f"http://127.0.0.1:{port}")
            first = await probe(w)
            assert (first.ok, first.model_id, first.adapters) == (True, "base", ("sql", "chat"))
            w = replace(w, model_id="base", adapters=("sql", "chat"))
            listing["ids"] = ["base", "chat"]
            assert (await probe(w)).adapters == ("chat",)
            listing["status"] = 500
            kept = await probe(w)
            assert (kept.ok, kept.model_id, kept.adapters) == (True, "base", None)
            given = replace(w, model_id="registered-as", adapters=())
            listing["status"] = 200
            other = await probe(given)  # a model_id given at registration the list lacks
            assert (other.ok, other.model_id, other.adapters) == (True, "registered-as", ())
    finally:
        await runner.cleanup()
