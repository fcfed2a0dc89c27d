"""Which request a connection's next bytes begin: the method and path of a request line read
from a prefix of it, before the parser sees any of it (sans-IO, pure).

The edge uses it to decide, at a request boundary of an idle connection, whether it answers the
request or hands the connection over (smg/edge/protocol.py).
"""

from __future__ import annotations

from typing import Final

MAX_LINE: Final = 8192  # past this without a whole request line, the parser judges the bytes
_MAX_METHOD: Final = 32

INCOMPLETE: Final = None
MALFORMED: Final = (b"", b"")


def request_target(data: bytes) -> tuple[bytes, bytes] | None:
    """(method, path without the query) of the request line `data` begins with; None while the
    line is not whole yet; `MALFORMED` (empty method) when the bytes cannot begin a request line
    (the parser answers those)."""
    start = 0
    while data.startswith(b"\r\n", start):  # empty lines before a request line are allowed
        start += 2
    if data.startswith(b"\r", start) and len(data) == start + 1:
        return INCOMPLETE
    sp = data.find(b" ", start, start + _MAX_METHOD + 1)
    if sp < 0:
        rest = data[start:]
        if len(rest) > _MAX_METHOD or (rest and not rest.isalpha()):
            return MALFORMED
        return INCOMPLETE
    method = data[start:sp]
    if not method or not method.isalpha():
        return MALFORMED
    end = data.find(b" ", sp + 1)
    if end < 0:
        if b"\n" in data[sp + 1 :] or len(data) - start > MAX_LINE:
            return MALFORMED
        return INCOMPLETE
    target = data[sp + 1 : end]
    if not target or b"\n" in target or b"\r" in target:
        return MALFORMED
    return method, target.partition(b"?")[0]
