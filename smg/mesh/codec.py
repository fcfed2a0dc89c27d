"""The mesh wire format: SWIM packets (UDP) and stream frames (TCP), sans-IO.

Packet layout::

    version:1  payload:msgpack                          (no cluster key: loopback only)
    version:1  nonce:12  AES-256-GCM(payload)  tag:16    (keyed: see keyring.py)

The version byte holds the wire version in its low 7 bits and, in its high bit, whether the
packet is encrypted. The associated data of the encryption is the version byte plus the channel
(datagram or stream frame). Flagging keyed packets in the version byte makes a key mismatch in
either direction a clean ``bad_mac`` instead of a parse of ciphertext as msgpack.

Each message is a compact msgpack array ``[type_tag, field, ...]`` in dataclass field order;
updates lists (StateSync, PushPull) hold update arrays; Compound is ``[tag, [part, ...]]`` and
its parts may not be Compounds. A stream frame is a 4-byte big-endian length then one packet.

Everything a peer can send that is not a well-typed message raises :class:`CodecError` (the
peer's fault); encoding an ill-formed message of our own raises ``ValueError`` (our fault).
Every field is range-checked on the way in: sequence numbers are uint64, incarnations at most
``MAX_INCARNATION`` (so refuting one, +1, still encodes), node ids and namespaces at most
``MAX_NAME_BYTES`` of UTF-8, addresses non-empty and printable. The core only ever echoes values
that passed these checks, so encoding our own messages cannot fail on anything a peer sent.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, Final, Literal

import msgpack

from smg.mesh.keyring import SEAL_OVERHEAD, Keyring
from smg.mesh.messages import (
    MAX_COMPOUND_PARTS,
    MAX_INCARNATION,
    MAX_NAME_BYTES,
    PACKET_ENVELOPE_BYTES,
    Ack,
    Alive,
    Compound,
    Dead,
    DocUpdate,
    DocVector,
    Join,
    Leave,
    Message,
    Nack,
    Ping,
    PingReq,
    PushPull,
    StateSync,
    StreamMessage,
    Suspect,
    Update,
)

WIRE_VERSION: Final = 2  # 1 was HMAC-SHA256 over plaintext
KEYED_FLAG: Final = 0x80
SEAL_BYTES: Final = SEAL_OVERHEAD  # what a key adds to each packet and frame
assert PACKET_ENVELOPE_BYTES == 1 + SEAL_BYTES, "messages.PACKET_ENVELOPE_BYTES is stale"
_PACKET_AAD: Final = b"p"
_FRAME_AAD: Final = b"f"
MAX_PACKET_BYTES: Final = 65_507  # largest UDP payload over IPv4
MAX_FRAME_BYTES: Final = 8 * 1024 * 1024
_UINT64_MAX: Final = 2**64 - 1
_LEN = struct.Struct(">I")

Reason = Literal["too_large", "bad_mac", "bad_version", "malformed"]


class CodecError(Exception):
    """Bytes from a peer that are not a valid message; `.reason` is a stable metric label."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: Reason = reason


# --- the message table: one row per type; field kinds in dataclass field order -----------------
# uint: uint64; inc: an incarnation (<= MAX_INCARNATION); name: a node id or namespace;
# addr: a peer address (non-empty, printable, no blanks)
Kind = Literal["uint", "inc", "name", "addr", "bytes", "bool", "updates"]

_PACKET_TYPES: Final[dict[int, tuple[type, tuple[Kind, ...]]]] = {
    1: (Ping, ("uint", "name")),
    2: (PingReq, ("uint", "name", "addr")),
    3: (Ack, ("uint",)),
    4: (Nack, ("uint",)),
    5: (Alive, ("name", "addr", "inc")),
    6: (Suspect, ("name", "inc", "name")),
    7: (Dead, ("name", "inc", "name")),
    8: (Leave, ("name", "inc")),
    9: (Join, ("name", "addr", "inc")),
    10: (StateSync, ("updates",)),
    # 11 is Compound, handled apart: its one field is a list of messages.
}
_COMPOUND_TAG: Final = 11
_UPDATE_TAGS: Final = frozenset({5, 6, 7, 8})
_STREAM_TYPES: Final[dict[int, tuple[type, tuple[Kind, ...]]]] = {
    20: (PushPull, ("name", "addr", "updates", "bool")),
    21: (DocVector, ("name", "bytes", "bool")),
    22: (DocUpdate, ("name", "bytes")),
}


def _rows(
    table: dict[int, tuple[type, tuple[Kind, ...]]],
) -> dict[type, tuple[int, tuple[str, ...], tuple[Kind, ...]]]:
    rows = {}
    for tag, (cls, kinds) in table.items():
        names = tuple(f.name for f in dataclasses.fields(cls))
        assert len(names) == len(kinds), cls
        rows[cls] = (tag, names, kinds)
    return rows


_ENCODE_ROWS: Final = _rows(_PACKET_TYPES) | _rows(_STREAM_TYPES)
_STREAM_TYPES_SET: Final = frozenset(cls for cls, _ in _STREAM_TYPES.values())


def is_addr(value: str) -> bool:
    """A usable peer address: non-empty, printable, no blanks. Whether it parses as host:port is
    the transport's business (the simulated network uses bare names)."""
    # isprintable() is False for every blank but the ASCII space
    return bool(value) and value.isprintable() and " " not in value


def _problem(kind: Kind, value: Any) -> str | None:
    """Why `value` is not a valid `kind` field, or None when it is (scalar kinds only)."""
    match kind:
        case "uint" | "inc":
            top = MAX_INCARNATION if kind == "inc" else _UINT64_MAX
            if type(value) is not int:
                return f"expected {kind}, got {type(value).__name__}"
            if not 0 <= value <= top:
                return f"{kind} out of range: {value}"
        case "name" | "addr":
            if type(value) is not str:
                return f"expected str, got {type(value).__name__}"
            size = len(value) if value.isascii() else len(value.encode())
            if size > MAX_NAME_BYTES:
                return f"{kind} longer than {MAX_NAME_BYTES} bytes"
            if kind == "addr" and not is_addr(value):
                return "not a usable address"
        case "bytes" | "bool":
            if type(value) is not (bytes if kind == "bytes" else bool):
                return f"expected {kind}, got {type(value).__name__}"
    return None


# --- encoding ----------------------------------------------------------------------------------
def _wire_value(kind: Kind, value: Any) -> Any:
    if kind == "updates":
        if any(type(u) not in (Alive, Suspect, Dead, Leave) for u in value):
            raise ValueError("updates may hold only Alive, Suspect, Dead and Leave")
        return [_to_wire(u) for u in value]
    problem = _problem(kind, value)
    if problem is not None:
        raise ValueError(f"{problem}: {value!r}"[:200])
    return value


def _to_wire(msg: Message | StreamMessage) -> list[Any]:
    if isinstance(msg, Compound):
        if len(msg.parts) > MAX_COMPOUND_PARTS:
            raise ValueError(f"Compound has {len(msg.parts)} parts, max {MAX_COMPOUND_PARTS}")
        if any(isinstance(p, Compound) for p in msg.parts):
            raise ValueError("Compound may not nest")
        return [_COMPOUND_TAG, [_to_wire(p) for p in msg.parts]]
    tag, names, kinds = _ENCODE_ROWS[type(msg)]
    return [tag, *(_wire_value(k, getattr(msg, n)) for n, k in zip(names, kinds, strict=True))]


def _seal(obj: list[Any], keyring: Keyring | None, channel: bytes) -> bytes:
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    if keyring is None:
        return bytes((WIRE_VERSION,)) + payload
    version = bytes((WIRE_VERSION | KEYED_FLAG,))
    return version + keyring.seal(version + channel, payload)


def encode_packet(msg: Message, keyring: Keyring | None) -> bytes:
    """One UDP datagram for `msg`; encrypted when the cluster has a keyring."""
    if type(msg) in _STREAM_TYPES_SET:
        raise ValueError(f"{type(msg).__name__} is a stream message; use encode_frame")
    return _seal(_to_wire(msg), keyring, _PACKET_AAD)


def encode_frame(msg: StreamMessage, keyring: Keyring | None) -> bytes:
    """One length-prefixed TCP frame for `msg`."""
    if type(msg) not in _STREAM_TYPES_SET:
        raise ValueError(f"{type(msg).__name__} is a packet message; use encode_packet")
    body = _seal(_to_wire(msg), keyring, _FRAME_AAD)
    return _LEN.pack(len(body)) + body


def encoded_size(msg: Message) -> int:
    """Exact length of `encode_packet(msg, None)`; a keyed packet is SEAL_BYTES longer."""
    return len(encode_packet(msg, None))


# --- decoding ----------------------------------------------------------------------------------
def _malformed(detail: str) -> CodecError:
    return CodecError("malformed", detail)


def _open(data: bytes, keyring: Keyring | None, channel: bytes) -> Any:
    """Check the version, decrypt and authenticate, then unpack the payload into plain msgpack
    objects."""
    if not data:
        raise _malformed("empty")
    version = data[0]
    if version & ~KEYED_FLAG != WIRE_VERSION:
        raise CodecError("bad_version", f"version byte {version:#04x}")
    keyed = bool(version & KEYED_FLAG)
    if keyed != (keyring is not None):
        raise CodecError("bad_mac", "encrypted packet without a key" if keyed else "plaintext")
    if keyring is None:
        payload = data[1:]
    else:
        opened = keyring.open(data[:1] + channel, data[1:])
        if opened is None:
            raise CodecError("bad_mac")
        payload = opened
    limit = len(payload)
    try:
        return msgpack.unpackb(
            payload,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=0,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises ValueError, its own errors, UnicodeDecodeError...
        raise _malformed(f"payload: {type(exc).__name__}") from None


def _field(kind: Kind, value: Any) -> Any:
    if kind == "updates":
        if type(value) is not list:
            raise _malformed("expected a list of updates")
        return tuple(_update(u) for u in value)
    problem = _problem(kind, value)
    if problem is not None:
        raise _malformed(problem)
    return value


def _build(table: dict[int, tuple[type, tuple[Kind, ...]]], obj: Any) -> Any:
    if type(obj) is not list or not obj or type(obj[0]) is not int:
        raise _malformed("expected [tag, fields...]")
    row = table.get(obj[0])
    if row is None:
        raise _malformed(f"unknown tag {obj[0]}")
    cls, kinds = row
    if len(obj) != 1 + len(kinds):
        raise _malformed(f"{cls.__name__} wants {len(kinds)} fields, got {len(obj) - 1}")
    make: Callable[..., Any] = cls
    return make(*(_field(k, v) for k, v in zip(kinds, obj[1:], strict=True)))


def _update(obj: Any) -> Update:
    if type(obj) is not list or not obj or type(obj[0]) is not int or obj[0] not in _UPDATE_TAGS:
        raise _malformed("expected an update")
    update: Update = _build(_PACKET_TYPES, obj)
    return update


def _message(obj: Any, *, nested: bool) -> Message:
    if type(obj) is list and len(obj) >= 1 and type(obj[0]) is int and obj[0] == _COMPOUND_TAG:
        if nested:
            raise _malformed("nested Compound")
        if len(obj) != 2 or type(obj[1]) is not list:
            raise _malformed("Compound wants [tag, [parts...]]")
        if len(obj[1]) > MAX_COMPOUND_PARTS:
            raise _malformed(f"Compound has {len(obj[1])} parts, max {MAX_COMPOUND_PARTS}")
        return Compound(tuple(_message(p, nested=True) for p in obj[1]))
    msg: Message = _build(_PACKET_TYPES, obj)
    return msg


def decode_packet(
    data: bytes, keyring: Keyring | None, max_bytes: int = MAX_PACKET_BYTES
) -> Message:
    """The message in one UDP datagram; raises CodecError for anything else."""
    if len(data) > max_bytes:
        raise CodecError("too_large", f"{len(data)} > {max_bytes} bytes")
    return _message(_open(data, keyring, _PACKET_AAD), nested=False)


def decode_frame_body(body: bytes, keyring: Keyring | None) -> StreamMessage:
    """The message in one frame's body (the bytes after the length prefix)."""
    msg: StreamMessage = _build(_STREAM_TYPES, _open(body, keyring, _FRAME_AAD))
    return msg


class FrameDecoder:
    """Splits a TCP byte stream into StreamMessages. Sans-IO: feed bytes, get messages.

    A length prefix over `max_frame_bytes` is rejected as soon as its 4 bytes arrive, before
    any of its body is awaited. After an error the stream is unusable: every later `feed`
    raises the same error (messages decoded earlier in the failing `feed` are dropped; the
    caller closes the connection anyway).
    """

    __slots__ = ("_buf", "_error", "_keyring", "_max")

    def __init__(self, keyring: Keyring | None, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._keyring = keyring
        self._max = max_frame_bytes
        self._buf = bytearray()
        self._error: CodecError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame held; nonzero at end of stream means a cut frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[StreamMessage]:
        if self._error is not None:
            raise self._error
        try:
            return self._feed(data)
        except CodecError as exc:
            self._error = exc
            self._buf.clear()
            raise

    def _feed(self, data: bytes) -> list[StreamMessage]:
        buf = self._buf
        buf += data
        out: list[StreamMessage] = []
        pos = 0
        while len(buf) - pos >= _LEN.size:
            (size,) = _LEN.unpack_from(buf, pos)
            if size > self._max:
                raise CodecError("too_large", f"frame of {size} > {self._max} bytes")
            end = pos + _LEN.size + size
            if len(buf) < end:
                break
            out.append(decode_frame_body(bytes(buf[pos + _LEN.size : end]), self._keyring))
            pos = end
        del buf[:pos]
        return out
