"""PD mode's legs: how a failed leg is told apart and told to the client.

A PD request runs two legs, prefill and decode, in one `TaskGroup`. A leg that fails raises
`LegFailed`, which cancels the other leg; the client gets a 502 (`pd_prefill_failed` /
`pd_decode_failed`, naming no worker: the details go to the log), or an error event if its
stream has already started (`fail_client`). Each leg holds its worker's in-flight count and
settles it (`smg.flow.runner.settle`) when it ends, cancelled legs with an unknown outcome.
"""

from __future__ import annotations

from aiohttp import web

from smg import errors
from smg.flow.relay import sse_error


class LegFailed(Exception):
    """A PD leg failed; `detail` names the worker and the cause (for the log only), `public`
    is what the client may read besides the role (never an address)."""

    def __init__(self, role: str, detail: str, public: str = "") -> None:
        super().__init__(f"{role}: {detail}")
        self.role = role
        self.detail = detail
        self.public = public

    def api_error(self) -> errors.ApiError:
        extra = f": {self.public}" if self.public else ""
        return errors.ApiError(
            502,
            f"pd_{self.role}_failed",
            f"The {self.role} worker failed to answer this request{extra}",
            type="server_error",
        )


async def fail_client(
    out: web.StreamResponse | None, err: errors.ApiError, *, ended: bool
) -> web.StreamResponse:
    """Tell the client a leg failed: raise `err` (an error response) before its stream started;
    after, an error event on the stream unless it already `ended` whole. A client gone by then
    gets nothing."""
    if out is None or not out.prepared:
        raise err
    if not ended:
        try:
            await out.write(sse_error(err))
            await out.write_eof()
        except ConnectionError:
            pass
    return out
