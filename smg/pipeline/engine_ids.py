"""Engine request ids are the gateway's, never the client's. Pure.

An engine keys its requests by id: two requests under one id collide, and an Abort for one
aborts the other. So whatever id reaches an engine or worker is made by the gateway (the
`X-Request-Id` header vLLM adopts, the gRPC `request_id`, SGLang's `rid`); the client's own id
(its `X-Request-Id` header) is kept for logs and echoed in the response headers only.

Bodies relayed as they are may still name an id: SGLang's `rid` (one per prompt of a batch) and
vLLM's `request_id` field. `with_engine_ids` replaces them.
"""

from __future__ import annotations

from typing import Any

import orjson

ID_FIELDS = ("rid", "request_id")


def with_engine_ids(body: dict[str, Any], engine_id: str) -> dict[str, Any] | None:
    """A copy of `body` whose id fields carry `engine_id` (a list of ids becomes as many ids
    derived from it, `<engine_id>-<i>`; a null one is dropped); None when the body names no id
    (send it unchanged)."""
    if "rid" not in body and "request_id" not in body:  # the common case, on every request
        return None
    out = dict(body)
    for name in ID_FIELDS:
        if name not in out:
            continue
        value = out[name]
        if value is None:
            del out[name]  # "not given": the engine makes its own
        elif isinstance(value, list):
            out[name] = [f"{engine_id}-{i}" for i in range(len(value))]
        else:
            out[name] = engine_id
    return out


def engine_body(raw: bytes, body: dict[str, Any], engine_id: str) -> bytes:
    """The bytes to relay for the client's `raw` body (parsed: `body`): `raw` itself unless it
    names an engine id, then re-encoded with the gateway's."""
    if "rid" not in body and "request_id" not in body:  # every request but a few: no call
        return raw
    renamed = with_engine_ids(body, engine_id)
    return raw if renamed is None else orjson.dumps(renamed)
