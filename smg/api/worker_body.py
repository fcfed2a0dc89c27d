"""The fields of a worker's JSON body on /workers (POST, PUT, PATCH), checked: pure, no I/O.

The Rust gateway's `WorkerSpec` (POST and PUT: the whole registration, defaults for what is left
out) and `WorkerUpdateRequest` (PATCH: priority, cost, labels, api_key; what is left out stays).
`url` is the route's to check (the address policy needs the network). Every bad value raises
`BadWorkerBody`, which the route answers 400 `BAD_REQUEST`; its message never carries a key.
"""

from __future__ import annotations

import math
from typing import Any

from smg.pipeline.providers import PROVIDERS

WORKER_TYPES = ("regular", "prefill", "decode")
# The Rust gateway's `RuntimeType` names (lowercase; "tensorrt-llm" is its alias of "trtllm").
RUNTIME_TYPES = ("sglang", "vllm", "trtllm", "mlx", "tokenspeed", "external")
FALLBACK_RUNTIME = "sglang"  # what it reports when nothing was given or detected

DEFAULT_PRIORITY = 50
DEFAULT_COST = 1.0
_U32_MAX = 2**32 - 1


class BadWorkerBody(ValueError):
    pass


def _priority(value: object) -> int:
    if type(value) is not int or not 0 <= value <= _U32_MAX:
        raise BadWorkerBody("Invalid JSON data: `priority` must be a non-negative integer")
    return value


def _cost(value: object) -> float:
    if type(value) not in (int, float) or not (0 <= float(value) < math.inf):  # type: ignore[arg-type]
        raise BadWorkerBody("Invalid JSON data: `cost` must be a non-negative number")
    return float(value)  # type: ignore[arg-type]


def _labels(value: object) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadWorkerBody("Invalid JSON data: `labels` must be an object of strings")
    return tuple(sorted(value.items()))


def _api_key(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise BadWorkerBody("Invalid JSON data: `api_key` must be a non-empty string")
    return value


def _runtime(value: object) -> str | None:
    name = value.lower() if isinstance(value, str) else None
    if name == "tensorrt-llm":
        name = "trtllm"
    if name == "unspecified":
        return None
    if name not in RUNTIME_TYPES:
        known = ", ".join(RUNTIME_TYPES)
        raise BadWorkerBody(f"Invalid JSON data: unknown `runtime_type` {value!r} ({known})")
    return name


def _provider(value: object) -> str:
    if value not in PROVIDERS:
        known = ", ".join(PROVIDERS)
        raise BadWorkerBody(f"Invalid JSON data: `provider` must be one of {known}, got {value!r}")
    assert isinstance(value, str)
    return value


def _bootstrap_port(value: object) -> int | None:
    if value is not None and (type(value) is not int or not 0 < value < 65536):
        raise BadWorkerBody("Invalid JSON data: `bootstrap_port` must be a port or null")
    return value


# A model card's fields that smg keeps as the worker's labels of the same name (a label given
# wins): where its model's tokenizer and chat template come from (smg/actors/tokenizers.py).
CARD_LABELS = ("tokenizer_path", "chat_template")


def _card_labels(
    models: object, labels: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """`models` (the Rust gateway's model cards: one object or a list, the first is the
    worker's primary model): its `tokenizer_path` and `chat_template` folded into the labels."""
    if models is None:
        return labels
    card = models[0] if isinstance(models, list) and models else models
    if isinstance(models, list) and not models:
        return labels
    if not isinstance(card, dict):
        raise BadWorkerBody("Invalid JSON data: `models` must be a list of model cards")
    merged = dict(labels)
    for name in CARD_LABELS:
        value = card.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise BadWorkerBody(f"Invalid JSON data: `models[0].{name}` must be a string")
        merged.setdefault(name, value)
    return tuple(sorted(merged.items()))


def spec_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A whole registration (POST, PUT): every `WorkerSnapshot` field it sets, defaults filled
    in. `model_id` and `runtime_type` are absent when not given (the probes learn them; a
    replaced worker keeps what they learned); `api_key` None: no own key."""
    worker_type = body.get("worker_type", "regular")
    if worker_type not in WORKER_TYPES:
        raise BadWorkerBody(f"Invalid worker_type {worker_type!r}")
    out: dict[str, Any] = {
        "worker_type": worker_type,
        "priority": _priority(body.get("priority", DEFAULT_PRIORITY)),
        "cost": _cost(body.get("cost", DEFAULT_COST)),
        "labels": _card_labels(body.get("models"), _labels(body.get("labels"))),
        "api_key": None if body.get("api_key") is None else _api_key(body["api_key"]),
        "bootstrap_port": _bootstrap_port(body.get("bootstrap_port")),
    }
    runtime = body.get("runtime_type", body.get("runtime"))
    if runtime is not None:
        out["runtime_type"] = _runtime(runtime)
    provider = body.get("provider")
    if provider is not None or out.get("runtime_type") == "external":
        if out.setdefault("runtime_type", "external") != "external":
            raise BadWorkerBody("Invalid JSON data: a `provider` goes with runtime_type external")
        out["provider"] = _provider(provider)
    model_id = body.get("model_id")
    if model_id is not None:
        if not isinstance(model_id, str) or not model_id:
            raise BadWorkerBody("Invalid JSON data: `model_id` must be a non-empty string")
        out["model_id"] = model_id
    return out


def update_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A PATCH: only the fields given (null: left as it is, as serde reads an absent Option)."""
    checks = {"priority": _priority, "cost": _cost, "labels": _labels, "api_key": _api_key}
    return {name: check(body[name]) for name, check in checks.items() if body.get(name) is not None}
