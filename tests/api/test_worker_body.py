"""The pure parts of the worker API: body checks (POST/PUT/PATCH /workers) and the fan-out
reports (/flush_cache, /get_loads), in the Rust gateway's shapes."""

from __future__ import annotations

from typing import Any

import pytest

from smg.actors.worker import initial_snapshot
from smg.api.worker_body import BadWorkerBody, spec_fields, update_fields
from smg.api.worker_reports import flush_report, loads_report
from smg.config import CircuitBreakerConfig
from smg.core.circuit_breaker import CircuitBreaker
from smg.core.snapshots import WorkerSnapshot


def worker(url: str, active: int = 0) -> WorkerSnapshot:
    w = initial_snapshot(
        url, url, model_id="m", worker_type="regular", api_key=None,
        breaker=CircuitBreaker(CircuitBreakerConfig()),
    )  # fmt: skip
    w.counter.active = active
    return w


def test_spec_defaults_and_values() -> None:
    assert spec_fields({}) == {
        "worker_type": "regular", "priority": 50, "cost": 1.0, "labels": (), "api_key": None,
        "bootstrap_port": None,
    }  # fmt: skip
    got = spec_fields(
        {"priority": 0, "cost": 2, "labels": {"b": "2", "a": "1"}, "api_key": "k",
         "runtime": "TensorRT-LLM", "model_id": "x", "worker_type": "prefill",
         "bootstrap_port": 8998}
    )  # fmt: skip
    assert got["labels"] == (("a", "1"), ("b", "2"))
    assert (got["priority"], got["cost"], got["runtime_type"]) == (0, 2.0, "trtllm")
    assert (got["model_id"], got["worker_type"], got["bootstrap_port"]) == ("x", "prefill", 8998)
    assert spec_fields({"runtime_type": "unspecified"})["runtime_type"] is None


@pytest.mark.parametrize(
    "body",
    [
        {"priority": True}, {"priority": 2**32}, {"cost": float("nan")}, {"cost": float("inf")},
        {"cost": False}, {"labels": {"a": None}}, {"runtime_type": "tgi"}, {"runtime_type": 3},
        {"worker_type": "encode"}, {"bootstrap_port": 0}, {"model_id": ""}, {"api_key": ""},
        {"runtime_type": "external"}, {"provider": "cohere"},
        {"runtime_type": "vllm", "provider": "openai"},
    ],
)  # fmt: skip
def test_spec_rejects(body: dict[str, Any]) -> None:
    with pytest.raises(BadWorkerBody):
        spec_fields(body)


def test_a_provider_makes_an_external_worker() -> None:
    got = spec_fields({"runtime_type": "external", "provider": "anthropic", "api_key": "k"})
    assert (got["runtime_type"], got["provider"], got["api_key"]) == ("external", "anthropic", "k")
    assert spec_fields({"provider": "openai"})["runtime_type"] == "external"
    assert "provider" not in spec_fields({"runtime_type": "vllm"})


def test_update_takes_only_what_is_given() -> None:
    assert update_fields({}) == {}
    assert update_fields({"priority": None, "url": "ignored", "cost": 0.5}) == {"cost": 0.5}
    got = update_fields({"labels": {}, "api_key": "sk-x"})
    assert got == {"labels": (), "api_key": "sk-x"}
    with pytest.raises(BadWorkerBody) as err:
        update_fields({"api_key": ["sk-secret"]})
    assert "sk-secret" not in str(err.value)


def test_flush_report_shapes() -> None:
    ws = [worker("http://a:1"), worker("grpc://b:2"), worker("http://c:3")]
    status, body = flush_report(ws, {})
    assert status == 200
    assert body == {
        "status": "success", "message": "Successfully flushed cache on all 3 workers",
        "workers_flushed": 3, "total_http_workers": 2, "total_grpc_workers": 1,
        "total_zmq_workers_skipped": 0, "total_workers": 3,
    }  # fmt: skip
    status, body = flush_report(ws, {"grpc://b:2": "UNIMPLEMENTED"})
    assert status == 206 and body["status"] == "partial_success"
    assert body["message"] == "Cache flush: 2 succeeded, 1 failed"
    assert body["successful"] == ["http://a:1", "http://c:3"]
    assert body["failed"] == [{"worker": "grpc://b:2", "error": "UNIMPLEMENTED"}]
    status, body = flush_report([], {})
    assert status == 200 and body["message"] == "No workers available for cache flush"
    assert body["total_workers"] == 0 and "failed" not in body


def test_loads_report_shape() -> None:
    assert loads_report([worker("http://a:1", 2), worker("grpc://b:2")]) == {
        "workers": [{"worker": "http://a:1", "load": 2}, {"worker": "grpc://b:2", "load": 0}]
    }


def test_a_model_card_names_the_tokenizer_and_template_as_labels() -> None:
    card = {"id": "m", "tokenizer_path": "Org/tok", "chat_template": "/t.jinja"}
    for models in (card, [card, {"id": "other", "tokenizer_path": "Org/no"}]):
        labels = dict(spec_fields({"models": models})["labels"])
        assert labels == {"tokenizer_path": "Org/tok", "chat_template": "/t.jinja"}
    # a label given wins over the card
    body = {"models": [card], "labels": {"tokenizer_path": "/local"}}
    assert dict(spec_fields(body)["labels"])["tokenizer_path"] == "/local"
    assert spec_fields({"models": []})["labels"] == ()


@pytest.mark.parametrize("models", ["x", [3], [{"tokenizer_path": 1}], {"chat_template": ""}])
def test_a_bad_model_card_is_refused(models: object) -> None:
    with pytest.raises(BadWorkerBody):
        spec_fields({"models": models})
