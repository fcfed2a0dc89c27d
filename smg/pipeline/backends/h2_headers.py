"""Header blocks from the peer: HEADERS + CONTINUATION reassembly and HPACK decoding (pure).

Bounded, since the engine is not trusted: a block may take at most `max_list_bytes` encoded and
decoded (RFC 9113 field sizes, name + value + 32: HPACK amplifies, one byte can name a 4 KB
table entry) and `MAX_CONTINUATIONS` frames (an endless run of empty CONTINUATION frames costs
no bytes, only time). Past either bound the connection is closed (ENHANCE_YOUR_CALM): a block
cannot be skipped, since the HPACK state must follow every block (RFC 9113 §10.5.1). Before
these bounds, 64 MB of CONTINUATION frames were buffered.
"""

from __future__ import annotations

from smg.pipeline.backends import hpack
from smg.pipeline.backends.h2_frames import (
    ERROR_COMPRESSION,
    ERROR_ENHANCE_YOUR_CALM,
    FLAG_END_HEADERS,
    FLAG_PADDED,
    FLAG_PRIORITY,
    H2ProtocolError,
)

MAX_HEADER_LIST_BYTES = 64 * 1024  # gRPC response headers and trailers are a few hundred bytes
MAX_CONTINUATIONS = 64  # per block: a 64 KiB block needs 4 full frames

Headers = list[tuple[str, str]]


class HeaderBlocks:
    """The header block being received on a connection, and the HPACK state of all blocks."""

    __slots__ = ("_data", "_flags", "_frames", "decoder", "max_list_bytes", "sid")

    def __init__(self, max_list_bytes: int = MAX_HEADER_LIST_BYTES) -> None:
        self.decoder = hpack.Decoder()
        self.max_list_bytes = max_list_bytes
        # the stream of the block being received (its next frame must be a CONTINUATION);
        # 0: none (read per frame: an attribute, not a property)
        self.sid = 0
        self._flags = 0
        self._frames = 0
        self._data = bytearray()

    def headers(self, sid: int, flags: int, payload: bytes) -> tuple[int, Headers] | None:
        """A HEADERS frame; (its flags, the header list) when it ends the block."""
        if sid == 0:
            raise H2ProtocolError("HEADERS on stream 0")
        if flags & FLAG_PADDED:
            if not payload or payload[0] >= len(payload):
                raise H2ProtocolError("bad HEADERS padding")
            payload = payload[1 : len(payload) - payload[0]]
        if flags & FLAG_PRIORITY:
            payload = payload[5:]
        self.sid, self._flags, self._frames = sid, flags, 0
        self._data = bytearray()
        return self._add(flags, payload)

    def continuation(self, sid: int, flags: int, payload: bytes) -> tuple[int, Headers] | None:
        if sid == 0 or sid != self.sid:
            raise H2ProtocolError("CONTINUATION without its HEADERS")
        return self._add(flags, payload)

    def _add(self, flags: int, payload: bytes) -> tuple[int, Headers] | None:
        self._frames += 1
        if len(self._data) + len(payload) > self.max_list_bytes or self._frames > MAX_CONTINUATIONS:
            raise H2ProtocolError(
                f"a header block above {self.max_list_bytes} bytes or {MAX_CONTINUATIONS} frames",
                ERROR_ENHANCE_YOUR_CALM,
            )
        self._data += payload
        if not flags & FLAG_END_HEADERS:
            return None
        data, self._data, self.sid = bytes(self._data), bytearray(), 0
        try:
            return self._flags, self.decoder.decode(data, self.max_list_bytes)
        except hpack.HeaderListTooLarge as exc:
            raise H2ProtocolError(f"HPACK: {exc}", ERROR_ENHANCE_YOUR_CALM) from None
        except hpack.HpackError as exc:
            raise H2ProtocolError(f"HPACK: {exc}", ERROR_COMPRESSION) from None
