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

from collections.abc import Callable, Set
from typing import Final

Native = Callable[[bytes], bool | None]

# bytes a request token may hold (RFC 9110 tchar): a method that breaks it is no request line
_TCHAR: Final = frozenset(
    b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
MAX_METHOD: Final = 32
MALFORMED: Final = (b"", b"")  # not the start of a request line: the core answers it (400)


def request_target(prefix: bytes) -> tuple[bytes, bytes] | None:
    """`(method, path)` from the start of a request (the path ends at `?` or a space), None while
    more bytes could still complete them, `MALFORMED` when no request line starts so. Empty lines
    before a request are skipped (as llhttp does)."""
    start = 0
    n = len(prefix)
    while start < n and prefix[start] in b"\r\n":
        start += 1
    sp = prefix.find(b" ", start, start + MAX_METHOD + 1)
    if sp < 0:
        method = prefix[start : start + MAX_METHOD + 1]
        if len(method) > MAX_METHOD or not _TCHAR.issuperset(method):
            return MALFORMED
        return None
    method = prefix[start:sp]
    if not method or not _TCHAR.issuperset(method):
        return MALFORMED
    end = sp + 1
    while end < n:
        c = prefix[end]
        if c == 0x20 or c == 0x3F:  # " " or "?"
            return method, prefix[sp + 1 : end]
        if c == 0x0D or c == 0x0A:  # a line end inside the target: HTTP/0.9 or garbage
            return MALFORMED
        end += 1
    return None


def native_routes(routes: Set[tuple[bytes, bytes]]) -> Native:
    """A `native` answer from a set of `(method, path)`: a malformed start counts as native, so
    the edge's core answers it (400) instead of handing garbage over."""

    def native(prefix: bytes) -> bool | None:
        target = request_target(prefix)
        if target is None:
            return None
        return target is MALFORMED or target in routes

    return native


class Prefix:
    """The bytes of a request start held while `native` cannot decide; see the module doc.

    `add(data)` returns `(decision, held)`: None (keep holding; `held` is b""), True (serve it
    here: feed `held` to the core) or False (hand the connection over with `held`)."""

    __slots__ = ("bound", "held", "native")

    def __init__(self, native: Native, bound: int) -> None:
        self.native = native
        self.bound = bound
        self.held = b""

    def add(self, data: bytes) -> tuple[bool | None, bytes]:
        held = self.held + data if self.held else data
        decision = self.native(held)
        if decision is None and len(held) <= self.bound:
            self.held = held
            return None, b""
        self.held = b""
        return decision is not False, held


def line_of(method: bytes, path: bytes) -> bytes:
    """A parsed head's method and path as the prefix `native` reads."""
    return b"%s %s " % (method, path)
