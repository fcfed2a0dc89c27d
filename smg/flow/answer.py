"""A whole answer as the flow gives it: status, body and headers, neutral of the server that
writes it.

The flow's dispatchers answer with an aiohttp `web.StreamResponse` for a stream (prepared and
written against the client) and, where it renders a whole body itself (an engine's answer
collected, `render.whole`), with a `Whole`: building an aiohttp `web.Response` that the lean
edge then takes apart again costs more than the rest of the hand-over. Each server converts at
its own edge: the lean edge renders a `Whole`'s headers straight into its `Reply`
(smg/api/edge_routes.py); the aiohttp routes get a `web.Response` from `as_response`
(`Flow.serve`).
"""

from __future__ import annotations

from aiohttp import web


class Whole:
    """A whole answer: `content_type` and `headers` (no framing ones) as the client gets them;
    `content_type` None: `headers` carry their own (a worker's answer relayed), if any."""

    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        body: bytes | bytearray,
        headers: dict[str, str],
        status: int = 200,
        content_type: str | None = "application/json",
    ) -> None:
        self.body = body
        self.headers = headers
        self.status = status
        self.content_type = content_type


Answer = web.StreamResponse | Whole


def as_response(answer: Answer) -> web.StreamResponse:
    """`answer` as aiohttp's server takes it (a `Whole` becomes a `web.Response`)."""
    if isinstance(answer, Whole):
        return web.Response(
            body=answer.body,
            status=answer.status,
            content_type=answer.content_type,
            headers=answer.headers,
        )
    return answer
