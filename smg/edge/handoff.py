"""Which requests the edge serves itself, and which connections it hands over (sans-IO, pure).

The edge owns the listener; a request that is not one of its native routes is served by another
protocol (the gateway's aiohttp app) on the same socket. The decision is made from the request
line only, at a request boundary of an idle connection: the bytes received there are held in a
`Prefix` until `native(prefix)` can say (True: serve here, False: hand the connection over,
None: the request line is not complete yet). A prefix that grows past `bound` bytes without a
decision is fed to the core, whose limits answer it (400/431) as without a hand-over.

    native = native_routes({(b"POST", b"/v1/chat/completions"), ...})
    EdgeServer(handler, native=native, handoff=make_other_protocol)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Set
from typing import Final

from smg.errors import ApiError

Native = Callable[[bytes], bool | None]

MAX_METHOD: Final = 32
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"  # a request token's bytes (RFC 9110 tchar)
# empty lines (skipped as llhttp does), the method, one space, the path up to `?` or a space
_LINE = re.compile(rb"[\r\n]*(%s{1,%d}) ([^ ?\r\n]*)[ ?]" % (_TOKEN, MAX_METHOD))
_PARTIAL = re.compile(rb"[\r\n]*(%s{0,%d}|%s{1,%d} [^ ?\r\n]*)" % ((_TOKEN, MAX_METHOD) * 2))
MALFORMED: Final = (b"", b"")  # not the start of a request line: the core answers it (400)
PREFIX_BOUND: Final = 8 * 1024  # bytes held for a request line before the core judges them


def request_target(prefix: bytes) -> tuple[bytes, bytes] | None:
    """`(method, path)` from the start of a request (the path ends at `?` or a space), None while
    more bytes could still complete them, `MALFORMED` when no request line starts so. Empty lines
    before a request are skipped (as llhttp does)."""
    m = _LINE.match(prefix)
    if m is not None:
        return m.group(1), m.group(2)
    return None if _PARTIAL.fullmatch(prefix) is not None else MALFORMED


def native_routes(routes: Set[tuple[bytes, bytes]]) -> Native:
    """A `native` answer from a set of `(method, path)`: a malformed start counts as native, so
    the edge's core answers it (400) instead of handing garbage over. A request line that
    starts with a native route's method, path and the end of that path is judged by one
    `startswith` (the usual case: no regex, no match object)."""
    usual = tuple(b"%s %s%s" % (m, p, end) for m, p in routes for end in (b" ", b"?"))

    def native(prefix: bytes) -> bool | None:
        if prefix.startswith(usual):
            return True
        target = request_target(prefix)
        if target is None:
            return None
        return target is MALFORMED or target in routes

    return native


class Prefix:
    """The bytes of a request start held while `native` cannot decide; see the module doc.

    `add(data)` returns `(decision, held)`: None (keep holding; `held` is b""), True (serve it
    here: feed `held` to the core) or False (hand the connection over with `held`). `judged`
    says whether the last True came from `native` (not from the bound)."""

    __slots__ = ("bound", "held", "judged", "native")

    def __init__(self, native: Native, bound: int) -> None:
        self.native = native
        self.bound = bound
        self.held = b""
        self.judged = False

    def add(self, data: bytes) -> tuple[bool | None, bytes]:
        held = self.held + data if self.held else data
        decision = self.native(held)
        if decision is None and len(held) <= self.bound:
            self.held = held
            return None, b""
        self.held = b""
        self.judged = decision is not None
        return decision is not False, held


def line_of(method: bytes, path: bytes) -> bytes:
    """A parsed head's method and path as the prefix `native` reads."""
    return b"%s %s " % (method, path)


def pipelined_handoff() -> ApiError:
    """A non-native request parsed behind another in one read: it cannot be handed over."""
    msg = (
        "This request was pipelined behind another on the same connection and is served by "
        "the gateway's other HTTP stack; send it on a new connection or after the previous "
        "answer."
    )
    return ApiError(400, "pipelined_handoff", msg)
