"""HPACK (RFC 7541) for the lean gRPC client: decode any header block, encode plain literals.

Pure: bytes in, header lists out. The decoder handles everything a peer may send (indexed
fields, literals with and without indexing, the dynamic table and its size updates, Huffman
strings); the encoder writes every field as a literal without indexing and without Huffman, which
any decoder accepts and which keeps the peer's view of our (empty) dynamic table trivial.

Errors are the peer's fault: `HpackError` (a malformed block from the server), and its subclass
`HeaderListTooLarge` when a block decodes to more than the caller's cap. The cap matters because
HPACK amplifies: one byte can name a 4 KB dynamic-table entry, so a 64 KiB block could decode to
256 MB of headers; `decode` counts as it goes (RFC 9113 field sizes: name + value + 32) and stops
at the cap. A dynamic table size update is accepted only at the start of a block (RFC 7541 §4.2)
and never above our SETTINGS_HEADER_TABLE_SIZE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# RFC 7541 Appendix B: the Huffman code length of each symbol (0-255, then EOS = 256). The code
# is canonical (codes are consecutive in (length, symbol) order), so the lengths define it.
# fmt: off
_HUFFMAN_LENGTHS = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
)
# fmt: on
EOS = 256


def huffman_codes() -> list[tuple[int, int]]:
    """(code, length) per symbol, built canonically from the lengths."""
    codes = [(0, 0)] * len(_HUFFMAN_LENGTHS)
    code, prev_len = 0, 0
    for sym in sorted(range(len(_HUFFMAN_LENGTHS)), key=lambda s: (_HUFFMAN_LENGTHS[s], s)):
        length = _HUFFMAN_LENGTHS[sym]
        code <<= length - prev_len
        codes[sym] = (code, length)
        code += 1
        prev_len = length
    return codes


_CODES = huffman_codes()
# decode: per code length, the code -> symbol map (a header value is a few dozen bytes)
_DECODE: dict[int, dict[int, int]] = {}
for _sym, (_code, _len) in enumerate(_CODES):
    _DECODE.setdefault(_len, {})[_code] = _sym
_MIN_LEN = min(_DECODE)


class HpackError(Exception):
    """A malformed header block from the peer."""


class HeaderListTooLarge(HpackError):
    """A header block that decodes to more than the caller accepts."""


def huffman_decode(data: bytes) -> bytes:
    out = bytearray()
    code, length = 0, 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            if length < _MIN_LEN:
                continue
            table = _DECODE.get(length)
            if table is None:
                continue
            sym = table.get(code)
            if sym is None:
                if length > 30:
                    raise HpackError("invalid Huffman code")
                continue
            if sym == EOS:
                raise HpackError("EOS inside a Huffman string")
            out.append(sym)
            code, length = 0, 0
    # padding: fewer than 8 bits, all ones (the EOS prefix)
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


def huffman_encode(data: bytes) -> bytes:
    """For tests and completeness; the encoder below does not use it."""
    acc, bits = 0, 0
    for byte in data:
        code, length = _CODES[byte]
        acc = (acc << length) | code
        bits += length
    pad = -bits % 8
    acc = (acc << pad) | ((1 << pad) - 1)
    return acc.to_bytes((bits + pad) // 8, "big") if bits else b""


def _decode_int(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    mask = (1 << prefix_bits) - 1
    if pos >= len(data):
        raise HpackError("truncated integer")
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise HpackError("truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos
        if shift > 28:
            raise HpackError("integer too large")


def encode_int(value: int, prefix_bits: int, flags: int = 0) -> bytes:
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes((flags | value,))
    out = bytearray((flags | mask,))
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise HpackError("truncated string")
    huffman = data[pos] & 0x80
    length, pos = _decode_int(data, pos, 7)
    end = pos + length
    if end > len(data):
        raise HpackError("truncated string")
    raw = data[pos:end]
    if huffman:
        raw = huffman_decode(raw)
    return raw.decode("latin-1"), end


MEMO_BLOCKS, MEMO_BLOCK_BYTES = 16, 512  # what a `Decoder` keeps of the blocks it decoded


class Decoder:
    """One connection's HPACK decoding state (the peer's dynamic table as we mirror it)."""

    __slots__ = ("_max_size", "_memo", "_size", "_table", "_version", "max_allowed")

    def __init__(self, max_table_size: int = 4096) -> None:
        self.max_allowed = max_table_size  # what our SETTINGS_HEADER_TABLE_SIZE allows
        self._max_size = max_table_size
        self._size = 0
        self._table: deque[tuple[str, str]] = deque()  # newest first
        # a server sends the same blocks call after call (its response headers, its trailers):
        # a block that left the table as it was decodes the same while the table stays so
        # (`_version` counts its changes); a few short ones are kept, by their bytes
        self._version = 0
        self._memo: dict[bytes, tuple[int, int | None, tuple[tuple[str, str], ...]]] = {}

    def _get(self, index: int) -> tuple[str, str]:
        if 1 <= index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dyn = index - len(STATIC_TABLE) - 1
        if 0 <= dyn < len(self._table):
            return self._table[dyn]
        raise HpackError(f"header index {index} out of range")

    def _add(self, name: str, value: str) -> None:
        self._version += 1
        size = len(name) + len(value) + 32
        self._table.appendleft((name, value))
        self._size += size
        self._evict()

    def _evict(self) -> None:
        while self._size > self._max_size and self._table:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + 32

    def decode(self, block: bytes, max_list_size: int | None = None) -> list[tuple[str, str]]:
        """The header list of one whole block. With `max_list_size`, raises `HeaderListTooLarge`
        as soon as the fields decoded so far exceed it (name + value + 32 bytes each)."""
        version = self._version
        known = self._memo.get(block)
        if known is not None and known[0] == version and known[1] == max_list_size:
            return list(known[2])
        headers: list[tuple[str, str]] = []
        budget = (1 << 62) if max_list_size is None else max_list_size
        pos, end = 0, len(block)
        while pos < end:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _decode_int(block, pos, 7)
                if index == 0:
                    raise HpackError("header index 0")
                field = self._get(index)
            else:
                if byte & 0xC0 == 0x40:  # literal with incremental indexing
                    index, pos = _decode_int(block, pos, 6)
                    indexing = True
                elif byte & 0xE0 == 0x20:  # dynamic table size update
                    if headers:
                        raise HpackError("a table size update after a header field")
                    size, pos = _decode_int(block, pos, 5)
                    if size > self.max_allowed:
                        raise HpackError(f"table size {size} above the {self.max_allowed} allowed")
                    self._max_size = size
                    self._version += 1
                    self._evict()
                    continue
                else:  # literal without indexing (0000) or never indexed (0001)
                    index, pos = _decode_int(block, pos, 4)
                    indexing = False
                if index:
                    name = self._get(index)[0]
                else:
                    name, pos = _string(block, pos)
                value, pos = _string(block, pos)
                if indexing:
                    self._add(name, value)
                field = (name, value)
            budget -= len(field[0]) + len(field[1]) + 32
            if budget < 0:
                raise HeaderListTooLarge(f"a header list above {max_list_size} bytes")
            headers.append(field)
        if self._version == version and end <= MEMO_BLOCK_BYTES:
            if len(self._memo) >= MEMO_BLOCKS:
                self._memo.clear()
            self._memo[block] = (version, max_list_size, tuple(headers))
        return headers


def encode(headers: Iterable[tuple[str, str]]) -> bytes:
    """Literal fields without indexing, new names, no Huffman."""
    out = bytearray()
    for name, value in headers:
        n, v = name.encode("latin-1"), value.encode("latin-1")
        out.append(0)
        out += encode_int(len(n), 7)
        out += n
        out += encode_int(len(v), 7)
        out += v
    return bytes(out)
