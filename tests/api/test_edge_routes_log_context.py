"""The edge routes bind the request id into structlog's context by setting structlog's own
context variable directly (smg/api/edge_routes.py `_RID`): log lines inside see it, and only
while it is set."""

from __future__ import annotations

import contextvars

import pytest
import structlog

from smg.api.edge_routes import _RID

pytestmark = pytest.mark.unit


def _context() -> dict[str, object]:
    return structlog.contextvars.merge_contextvars(None, "warning", {})  # type: ignore[arg-type]


def test_the_request_id_is_in_structlog_context_only_while_set() -> None:
    def run() -> None:
        assert "request_id" not in _context()
        token = _RID.set("chatcmpl-abc")
        assert _context()["request_id"] == "chatcmpl-abc"
        assert structlog.contextvars.get_contextvars()["request_id"] == "chatcmpl-abc"
        _RID.reset(token)
        assert "request_id" not in _context()

    contextvars.Context().run(run)  # a fresh context, as a request's task has its own copy
