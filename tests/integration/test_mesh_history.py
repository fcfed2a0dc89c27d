"""Two mesh nodes (`smg node --join`) on one shared history backend (a real PostgreSQL, a real
redis-server, both started by this test run), driven with the `openai` SDK: a response made
through node A is continued through node B with previous_response_id, a conversation begun on A
goes on through B, and two turns sent through both nodes at once both land whole. The worker is
an HTTP sim registered on A only: B serves it because the mesh told it of it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from .conftest import Gateway, Launcher, free_port

pytestmark = pytest.mark.integration

MODEL = "mesh-history-model"
KEY = "mesh-history-cluster-key"


def _start(
    launch: Launcher, host: str, workers: list[Any], join: str | None, history: dict[str, Any]
) -> tuple[Gateway, str]:
    port = free_port()
    flags: dict[str, Any] = {
        "mesh_host": host,
        "mesh_port": port,
        "mesh_profile": "test",
        "cluster_key": KEY,
        **history,
    }
    if join is not None:
        flags["join"] = join
    gw = launch.gateway(workers, ready=len(workers), command="node", **flags)
    return gw, f"{host}:{port}"


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_two_nodes_share_chains_and_conversations(
    backend: str, launch: Launcher, request: pytest.FixtureRequest
) -> None:
    history: dict[str, Any] = {"history_backend": backend}
    if backend == "postgres":
        history["postgres_db_url"] = request.getfixturevalue("postgres_url")
    else:
        history["redis_url"] = request.getfixturevalue("redis_url")
    sim = launch.sim(MODEL)
    a, a_addr = _start(launch, "127.0.0.61", [sim], None, history)
    b, _ = _start(launch, "127.0.0.62", [], a_addr, history)
    b.wait_ready(1, 20.0)  # B learns A's worker through the mesh and finds it healthy

    with a.client(timeout_s=20.0) as on_a, b.client(timeout_s=20.0) as on_b:
        first = on_a.responses.create(model=MODEL, input="First question.")
        second = on_b.responses.create(
            model=MODEL, input="Second question.", previous_response_id=first.id
        )
        alone = on_b.responses.create(model=MODEL, input="Second question.", store=False)
        assert second.status == "completed" and second.previous_response_id == first.id
        assert second.usage is not None and alone.usage is not None
        assert second.usage.input_tokens > alone.usage.input_tokens  # B read A's turn
        assert on_a.responses.retrieve(second.id).output_text == second.output_text
        assert on_b.responses.retrieve(first.id).output_text == first.output_text

        conv = on_a.conversations.create(metadata={"topic": "mesh"})
        one = on_a.responses.create(model=MODEL, input="One.", conversation=conv.id)
        two = on_b.responses.create(model=MODEL, input="Two.", conversation=conv.id)
        assert one.usage is not None and two.usage is not None
        assert two.usage.input_tokens > one.usage.input_tokens  # B saw A's turn first
        assert on_b.conversations.retrieve(conv.id).metadata == {"topic": "mesh"}

        def turn(client: openai.OpenAI, text: str) -> str:
            return client.responses.create(model=MODEL, input=text, conversation=conv.id).id

        with ThreadPoolExecutor(2) as pool:  # one more turn through each node, at once
            done = list(pool.map(turn, (on_a, on_b), ("Three.", "Four.")))
        assert len(done) == 2

        for client in (on_a, on_b):
            items = list(client.conversations.items.list(conv.id, order="asc"))
            roles = [getattr(i, "role", None) for i in items]
            assert roles == ["user", "assistant"] * 4, roles  # every turn whole, none mixed
            texts = [part.text for i in items[::2] for part in getattr(i, "content", None) or []]
            assert texts[:2] == ["One.", "Two."] and sorted(texts[2:]) == ["Four.", "Three."]
