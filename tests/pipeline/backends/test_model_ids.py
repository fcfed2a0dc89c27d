"""What an HTTP worker serves: every id of its /v1/models (the model, then LoRA adapters), each
routable (indexed in the registry snapshot under every id)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from support.event_log import worker_snapshot

from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, WorkerSnapshot
from smg.pipeline.backends.http import model_ids


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
