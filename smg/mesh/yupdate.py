"""Yjs update (v1 encoding) decoding: what an update would write, read before it is applied.

pycrdt applies updates whole and offers no way to look inside one first, so the mesh decodes
the few shapes its documents hold (one root Map named by `ROOT`, binary values) and rejects
anything else. Layout (lib0 variable-length unsigned ints, "varuint"; strings are a varuint byte
length then UTF-8)::

    update  := varuint(#clients) { varuint(#structs) varuint(client) varuint(clock) struct* }*
               delete_set
    struct  := info:u8 ...       info & 0x1F: 0 GC, 10 Skip (varuint length), else an item:
               [origin ID if info & 0x80] [right origin ID if info & 0x40]
               [parent if neither origin: varuint(1) root name | varuint(0) parent ID]
               [key if neither origin and info & 0x20]  content
    content := 1 Deleted varuint(length) | 3 Binary varuint-bytes
               | 8 Any varuint(n) any*n (one Uint8Array, tag 116, is all we accept)
    delete_set := varuint(#clients) { varuint(client) varuint(#ranges) {varuint clock, len}* }
    ID      := varuint(client) varuint(clock)

An item carries its key (``parentSub``) only when it has no origin; an overwrite of a map key
points at the item it replaces (its origin) and inherits that item's key. Resolving those is the
caller's job (it knows what the document already holds; see ownership.py).

Everything malformed raises `UpdateError`; nothing is allocated in proportion to a length field
before that many bytes are known to be present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ROOT: Final = "m"  # the one root Map of every replicated document
MAX_UINT: Final = 2**53 - 1  # lib0's safe integers; Yjs client ids and clocks live below it

GC, DELETED, BINARY, SKIP, ANY = 0, 1, 3, 10, 8
_UINT8ARRAY: Final = 116  # lib0 "any" tag of a byte string


class UpdateError(ValueError):
    """Bytes that are not an update of the shape the mesh writes."""


ID = tuple[int, int]  # (client, clock)


@dataclass(frozen=True, slots=True)
class Struct:
    """One struct of an update: an item (value or deleted), a GC range or a Skip."""

    client: int
    clock: int
    length: int
    kind: int  # GC, SKIP, DELETED, BINARY or ANY
    origin: ID | None = None
    right_origin: ID | None = None
    parent: str | ID | None = None  # a root name, or the id of a parent item (never ours)
    key: str | None = None  # parentSub, present only when the item has no origin
    value: bytes | None = None  # the item's bytes (BINARY, ANY)


@dataclass(frozen=True, slots=True)
class Update:
    structs: tuple[Struct, ...]
    deletes: tuple[tuple[int, int, int], ...]  # (client, clock, length)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise UpdateError("truncated")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uint(self) -> int:
        value, shift = 0, 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 56:
                raise UpdateError("varuint too long")
        if value > MAX_UINT:
            raise UpdateError("varuint past 2^53")
        return value

    def raw(self) -> bytes:
        n = self.uint()
        if n > len(self.data) - self.pos:
            raise UpdateError("truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def text(self) -> str:
        try:
            return self.raw().decode()
        except UnicodeDecodeError:
            raise UpdateError("invalid UTF-8") from None

    def ident(self) -> ID:
        return (self.uint(), self.uint())

    def done(self) -> bool:
        return self.pos == len(self.data)


def _item(r: _Reader, client: int, clock: int, info: int) -> Struct:
    origin = r.ident() if info & 0x80 else None
    right_origin = r.ident() if info & 0x40 else None
    parent: str | ID | None = None
    key: str | None = None
    if origin is None and right_origin is None:
        parent = r.text() if r.uint() == 1 else r.ident()
        if info & 0x20:
            key = r.text()
    kind = info & 0x1F
    value: bytes | None = None
    length = 1
    if kind == DELETED:
        length = r.uint()
        if length == 0:
            raise UpdateError("empty deleted run")
    elif kind == BINARY:
        value = r.raw()
    elif kind == ANY:
        if r.uint() != 1 or r.byte() != _UINT8ARRAY:
            raise UpdateError("only single byte-string values are accepted")
        value = r.raw()
    else:
        raise UpdateError(f"unsupported content type {kind}")
    return Struct(client, clock, length, kind, origin, right_origin, parent, key, value)


def decode(data: bytes) -> Update:
    """The structs and delete set of a v1 update; raises UpdateError for anything else."""
    r = _Reader(data)
    structs: list[Struct] = []
    for _ in range(r.uint()):
        count, client, clock = r.uint(), r.uint(), r.uint()
        for _ in range(count):
            info = r.byte()
            kind = info & 0x1F
            if kind in (GC, SKIP):
                s = Struct(client, clock, r.uint(), kind)
            else:
                s = _item(r, client, clock, info)
            if s.length <= 0 or clock + s.length > MAX_UINT:
                raise UpdateError("bad struct length")
            structs.append(s)
            clock += s.length
    deletes: list[tuple[int, int, int]] = []
    for _ in range(r.uint()):
        client = r.uint()
        for _ in range(r.uint()):
            clock, length = r.uint(), r.uint()
            if length == 0 or clock + length > MAX_UINT:
                raise UpdateError("bad delete range")
            deletes.append((client, clock, length))
    if not r.done():
        raise UpdateError("trailing bytes")
    return Update(tuple(structs), tuple(deletes))


def decode_state_vector(data: bytes) -> dict[int, int]:
    """client -> next clock; raises UpdateError for anything else."""
    r = _Reader(data)
    out: dict[int, int] = {}
    for _ in range(r.uint()):
        client, clock = r.uint(), r.uint()
        out[client] = clock
    if not r.done():
        raise UpdateError("trailing bytes")
    return out
