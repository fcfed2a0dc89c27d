"""Per-caller rate limiting on the inference routes (`--rate-limit-tokens-per-second`).

The caller is the tenant of the credential the auth gate accepted (`request["principal"]`, see
smg/core/auth_keys.py): a tenant key's tenant, a hash of the shared key (raw keys are never
written into replicated state), `loopback`, or a trusted tenant header only with
`--trust-tenant-header`. A header the client chooses freely never picks the bucket. The limiter
is the mesh's cluster-wide one (`smg/mesh/rate_limit.py`); without a mesh it runs over a private
document with one live node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from smg import errors
from smg.api.middleware import Handler
from smg.mesh.rate_limit import ClusterRateLimiter

INFERENCE_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/embeddings",
        "/v1/rerank",
        "/rerank",
        "/v1/classify",
        "/generate",
    }
)


def caller_of(request: web.Request) -> str:
    principal = request.get("principal")
    return principal.tenant if principal is not None else "anonymous"


def rate_limit_middleware(
    limiter: ClusterRateLimiter, wall: Callable[[], float], live_nodes: Callable[[], int]
) -> Any:
    check = rate_check(limiter, wall, live_nodes)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST" and request.path in INFERENCE_PATHS:
            check(caller_of(request))
        return await handler(request)

    return middleware


def rate_check(
    limiter: ClusterRateLimiter, wall: Callable[[], float], live_nodes: Callable[[], int]
) -> Callable[[str], None]:
    """What both edges ask before an inference request runs: 429 for a caller over its rate."""

    def check(caller: str) -> None:
        now = wall()  # windows must line up across hosts: wall time, not monotonic
        if not limiter.try_acquire(caller, now, live_nodes()):
            wait = limiter.retry_after_s(caller, now)
            raise errors.ApiError(
                429,
                "rate_limit_exceeded",
                f"Rate limit exceeded for this caller; retry in {wait:.1f} s",
            )

    return check
