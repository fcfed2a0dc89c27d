"""Deadlines on one client connection: request headers, request body, response writes (pure).

Nothing here runs per byte or per chunk. The connection only keeps counters (bytes received,
requests started, response bytes written); a sweeper samples each connection about once a second
and hands the sample to `ConnDeadlines.observe` with `now`, which notes progress and says when a
deadline has passed:

- `HEADER_TIMEOUT`: a new connection has not brought its first request's headers whole
  `header_timeout_s` after it opened, or bytes of a later request arrived but its headers were not
  complete `header_timeout_s` after the first of them (slowloris). A kept-alive connection that
  sends nothing after a response is the keep-alive timer's business, not this one's (as nginx
  and Go's http.Server split them).
- `BODY_TIMEOUT`: the handler is reading the request body and no byte has arrived for
  `body_timeout_s`.
- `WRITE_STALL`: response bytes are waiting to be sent and the client has taken none of them for
  `write_timeout_s` (a client that stopped reading a stream).

Times are as the sweeper saw them, so a deadline is enforced within one sweep interval. A limit
of 0 turns its deadline off.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    HEADER_TIMEOUT = "header_timeout"
    BODY_TIMEOUT = "body_timeout"
    WRITE_STALL = "write_stall"


@dataclass(frozen=True, slots=True)
class DeadlineLimits:
    header_timeout_s: float
    body_timeout_s: float
    write_timeout_s: float


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at a connection's counters."""

    rx: int  # bytes received since it opened
    requests: int  # requests whose headers were complete and whose handler started
    in_request: bool  # a request's handler is running now
    rx_at_idle: int  # `rx` when the last request's handler ended (0 before the first)
    reading_body: bool  # the handler is reading the request body
    sent: int  # response bytes the client has taken (written minus still waiting)
    buffered: int  # response bytes waiting to be taken (in the transport, unacknowledged)


class ConnDeadlines:
    """The sweeper's memory of one connection between two samples."""

    __slots__ = (
        "_body_since",
        "_header_since",
        "_in_request",
        "_requests",
        "_rx",
        "_rx_since",
        "_sent",
        "_sent_since",
        "limits",
    )

    def __init__(self, limits: DeadlineLimits, now: float) -> None:
        self.limits = limits
        self._rx = 0
        self._rx_since = now
        self._requests = 0
        self._in_request = False
        self._header_since: float | None = now  # a new connection owes its first request now
        self._body_since: float | None = None
        self._sent = 0
        self._sent_since = now

    def observe(self, s: Sample, now: float) -> Verdict | None:
        lim = self.limits
        if s.rx != self._rx:
            self._rx, self._rx_since = s.rx, now
        if s.requests != self._requests or s.in_request != self._in_request:
            self._requests, self._in_request = s.requests, s.in_request
            self._header_since = None  # a request began or ended: a new header phase
            self._body_since = None
        if s.in_request or (s.requests and s.rx <= s.rx_at_idle):
            self._header_since = None  # in a request, or kept alive with nothing sent since
        elif self._header_since is None:
            self._header_since = now  # the first bytes of the next request's headers
        if not s.reading_body:
            self._body_since = None
        elif self._body_since is None:
            self._body_since = now
        if s.sent != self._sent or s.buffered == 0:
            self._sent, self._sent_since = s.sent, now  # progress, or nothing left to send

        since = self._header_since
        if since is not None and lim.header_timeout_s > 0 and now - since >= lim.header_timeout_s:
            return Verdict.HEADER_TIMEOUT
        if self._body_since is not None and lim.body_timeout_s > 0:
            quiet_since = max(self._body_since, self._rx_since)
            if now - quiet_since >= lim.body_timeout_s:
                return Verdict.BODY_TIMEOUT
        if lim.write_timeout_s > 0 and now - self._sent_since >= lim.write_timeout_s:
            return Verdict.WRITE_STALL
        return None
