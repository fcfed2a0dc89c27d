"""Stored history on every `--history-backend`, end to end with the `openai` SDK: a three-turn
chain through `previous_response_id` and a conversation, carried across a gateway restart on the
backends that keep data (sqlite file, real PostgreSQL, real redis-server, both started by this
test run), and lost across one on `memory` (which says so). The gateway is in gRPC mode in front
of a simulated Qwen3 engine whose replies are scripted (`SIM_REPLY:`)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import REPO, Engine, Gateway, Launcher, free_port

MODEL = "Qwen3-8B-sim"
# a closed loopback port: the connect is refused at once
SECRET_URL = f"postgresql://smg:hunter2@127.0.0.1:{free_port()}/smg"


def _flags(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    flags: dict[str, Any] = {"history_backend": backend}
    if backend == "sqlite":
        flags["sqlite_path"] = tmp_path / "history.db"
    elif backend == "postgres":
        flags["postgres_db_url"] = request.getfixturevalue("postgres_url")
    elif backend == "redis":
        flags["redis_url"] = request.getfixturevalue("redis_url")
    return flags


def _start(launch: Launcher, engine: Engine, flags: dict[str, Any]) -> Gateway:
    return launch.gateway([engine], tokenizer_path=qwen3_tokenizer_dir(), **flags)


def _restart(launch: Launcher, gw: Gateway, engine: Engine, flags: dict[str, Any]) -> Gateway:
    gw.proc.signal(signal.SIGTERM)  # a clean stop: the backend is closed as an operator stops it
    gw.proc.popen.wait(15)
    return _start(launch, engine, flags)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres", "redis"])
def test_a_chain_and_a_conversation_across_a_restart(
    backend: str, launch: Launcher, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    engine = launch.engine(MODEL, "vllm")
    flags = _flags(backend, tmp_path, request)
    gw = _start(launch, engine, flags)
    with gw.client(timeout_s=20.0) as client:
        first = client.responses.create(model=MODEL, input="SIM_REPLY: one")
        conv = client.conversations.create(metadata={"topic": "restart"})
        said = client.responses.create(model=MODEL, input="SIM_REPLY: a", conversation=conv.id)
        assert said.output_text == "a"

    gw = _restart(launch, gw, engine, flags)
    with gw.client(timeout_s=20.0) as client:
        if backend == "memory":  # kept in the process only: gone with it, and said so
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(first.id)
            with pytest.raises(openai.BadRequestError) as info:
                client.responses.create(model=MODEL, previous_response_id=first.id, input="x")
            assert info.value.code == "previous_response_not_found"
            return
        assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
        second = client.responses.create(
            model=MODEL, previous_response_id=first.id, input="SIM_REPLY: two"
        )
        third = client.responses.create(
            model=MODEL, previous_response_id=second.id, input="SIM_REPLY: three"
        )
        assert (second.output_text, third.output_text) == ("two", "three")
        assert first.usage and second.usage and third.usage
        # each turn renders the whole stored chain before its own input
        assert first.usage.input_tokens < second.usage.input_tokens < third.usage.input_tokens

        assert client.conversations.retrieve(conv.id).metadata == {"topic": "restart"}
        more = client.responses.create(model=MODEL, input="SIM_REPLY: b", conversation=conv.id)
        assert more.output_text == "b"
        items = list(client.conversations.items.list(conv.id, order="asc"))
        texts = [part.text for item in items for part in getattr(item, "content", None) or []]
        assert texts == ["SIM_REPLY: a", "a", "SIM_REPLY: b", "b"], texts


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--history-backend", "postgres"], "--history-backend postgres needs --postgres-db-url"),
        (
            ["--history-backend", "postgres", "--postgres-db-url", SECRET_URL],
            "--history-backend postgres: postgres connect failed: ConnectionRefusedError",
        ),
    ],
)
def test_a_history_backend_that_cannot_serve_stops_the_start(flags: list[str], said: str) -> None:
    """One line, exit 2, and never the URL or its password (an unreachable server included)."""
    out = subprocess.run(
        [sys.executable, "-m", "smg", "launch", "--port", "0", "--prometheus-port", "0", *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1] == f"smg: error: {said}"
    assert "hunter2" not in out.stderr and "hunter2" not in out.stdout
