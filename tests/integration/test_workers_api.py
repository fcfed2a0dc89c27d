"""The /workers admin API over real processes: list, add (202 + Location), get, delete."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .conftest import Gateway, Launcher, Sim, flat_error, wait_until

BODY = {"model": "m", "messages": [{"role": "user", "content": "workers"}], "max_tokens": 2}


@dataclass
class Setup:
    gw: Gateway
    first: Sim  # registered at launch
    spare: Sim  # added and removed by the tests


@pytest.fixture(scope="module")
def setup(module_launch: Launcher) -> Iterator[Setup]:
    first, spare = module_launch.sims("m", "m")
    gw = module_launch.gateway([first])
    yield Setup(gw, first, spare)


def test_list_shape(setup: Setup) -> None:
    r = setup.gw.request("GET", "/workers")
    assert r.status == 200
    body = r.json()
    assert set(body) >= {"workers", "total", "stats"}
    assert body["total"] == len(body["workers"]) >= 1
    assert set(body["stats"]) >= {"prefill_count", "decode_count", "regular_count"}
    w = next(w for w in body["workers"] if w["url"] == setup.first.url)
    uuid.UUID(w["id"])
    assert w["model_id"] == "m"
    assert w["is_healthy"] is True and w["status"] == "ready"
    assert w["worker_type"] == "regular" and w["connection_mode"] == "http"
    assert w["circuit_breaker"] == "closed"
    assert isinstance(w["load"], int)

    one = setup.gw.request("GET", f"/workers/{w['id']}")
    assert one.status == 200
    assert one.json()["url"] == setup.first.url


def test_add_serve_delete(setup: Setup) -> None:
    gw, first, spare = setup.gw, setup.first, setup.spare
    r = gw.request("POST", "/workers", {"url": spare.url})
    assert r.status == 202, r.body
    body = r.json()
    wid = body["worker_id"]
    location = r.header("location")
    assert location == f"/workers/{wid}"
    assert body["location"] == location

    def ready() -> bool:
        w = gw.request("GET", location)
        return w.status == 200 and w.json()["status"] == "ready"

    wait_until(ready, 10.0, "the added worker ready")
    assert gw.request("GET", location).json()["model_id"] == "m"  # learned from /v1/models
    assert gw.request("GET", "/workers").json()["total"] == 2

    # It serves traffic: round robin over both.
    before = spare.stats()["requests"], first.stats()["requests"]
    for _ in range(6):
        assert gw.request("POST", "/v1/chat/completions", BODY).status == 200
    after = spare.stats()["requests"], first.stats()["requests"]
    assert (after[0] - before[0], after[1] - before[1]) == (3, 3)

    # Adding it again conflicts.
    dup = gw.request("POST", "/workers", {"url": spare.url + "/"})
    flat_error(dup, 409, "WORKER_ALREADY_EXISTS")
    assert wid in dup.json()["error"]

    r = gw.request("DELETE", location)
    assert r.status == 202, r.body
    assert r.json()["worker_id"] == wid
    flat_error(gw.request("GET", location), 404, "WORKER_NOT_FOUND")
    assert all(w["url"] != spare.url for w in gw.workers())
    flat_error(gw.request("DELETE", location), 404, "WORKER_NOT_FOUND")

    # No more traffic to it.
    before_spare = spare.stats()["requests"]
    for _ in range(4):
        assert gw.request("POST", "/v1/chat/completions", BODY).status == 200
    assert spare.stats()["requests"] == before_spare


def test_duplicate_of_a_launch_worker_is_409(setup: Setup) -> None:
    flat_error(setup.gw.request("POST", "/workers", {"url": setup.first.url}), 409,
               "WORKER_ALREADY_EXISTS")  # fmt: skip


def test_unknown_and_malformed_ids(setup: Setup) -> None:
    gw = setup.gw
    flat_error(gw.request("GET", f"/workers/{uuid.uuid4()}"), 404, "WORKER_NOT_FOUND")
    flat_error(gw.request("DELETE", f"/workers/{uuid.uuid4()}"), 404, "WORKER_NOT_FOUND")
    flat_error(gw.request("GET", "/workers/not-a-uuid"), 400, "BAD_REQUEST")
    flat_error(gw.request("DELETE", "/workers/not-a-uuid"), 400, "BAD_REQUEST")


@pytest.mark.parametrize(
    "body",
    [b'{"url": ', b"[]", {"worker_type": "regular"}, {"url": 5}, {"url": "ftp://x"}],
    ids=["invalid-json", "not-object", "missing-url", "url-not-string", "bad-scheme"],
)
def test_add_rejects_bad_bodies(setup: Setup, body: object) -> None:
    before = setup.gw.request("GET", "/workers").json()["total"]
    flat_error(setup.gw.request("POST", "/workers", body), 400, "BAD_REQUEST")
    assert setup.gw.request("GET", "/workers").json()["total"] == before
