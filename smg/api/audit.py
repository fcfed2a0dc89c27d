"""The audit log: one `control_plane_audit` line per control-plane request (`smg.audit`).

Fields (the Rust gateway's): principal, auth_method, role, method, path, request_id, outcome
(`allowed`: the caller passed authentication and authorization, whatever the handler answered;
`denied`: the gate refused it) and status. Never a key or a token: the principal is a key id, a
JWT subject, `loopback` or `unauthenticated`. Text that came from the client is escaped (no line
breaks or control characters) and cut at 256 characters, so a request cannot forge log lines.

The lines are written at info level whatever `--log-level` says (an audit trail does not
disappear with `--log-level warn`); `--disable-audit-logging` turns them off.
"""

from __future__ import annotations

import logging

import structlog
from aiohttp import web

from smg.core.auth_keys import Principal

_log = structlog.wrap_logger(
    None, wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
)
MAX_FIELD = 256


def clean(text: str, limit: int = MAX_FIELD) -> str:
    """Printable text on one line: control characters escaped, cut at `limit` characters."""
    cut = text[:limit]
    if cut.isprintable():
        out = cut
    else:
        out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return out + "...[truncated]" if len(text) > limit else out


def record(request: web.Request, status: int, principal: Principal | None, allowed: bool) -> None:
    _log.info(
        "control_plane_audit",
        logger="smg.audit",
        principal=clean(principal.id) if principal is not None else "unauthenticated",
        auth_method=principal.auth_method if principal is not None else "none",
        role=principal.role.label if principal is not None and principal.role else None,
        method=clean(request.method, 16),
        path=clean(request.path),
        request_id=request.get("request_id"),
        outcome="allowed" if allowed else "denied",
        status=status,
    )
