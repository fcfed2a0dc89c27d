"""Incremental detokenization by table for byte-level BPE tokenizers (GPT-2's scheme: Qwen,
Llama 3, most current models), pure, no IO.

Such a tokenizer's `ByteLevel` decoder turns each char of a token into the byte it stands for
(the byte-level alphabet: 256 chars, one per byte) and the bytes of all tokens into text (UTF-8,
invalid sequences as U+FFFD). A token with a char outside that alphabet (an added token such as
a literal space or newline in it) is taken as its own UTF-8 instead. So a token's bytes depend
on the token alone: `ByteTable` keeps them per id, worked out on first use (the vocabulary is
not walked at load: ~0.3 s for 150k ids), and a step of `ByteStream` is a table lookup and a
`bytes.decode`, in place of `DecodeStream.step`, which decodes its window twice in Rust (~4x the
instructions, measured with callgrind). Special tokens decode to nothing when skipped; ids the
tokenizer does not know to nothing, as its `decode` drops them.

`ByteStream` gives what `DecodeStream` gives, step for step: the bytes since the last text it
gave are decoded; text that ends in U+FFFD (a character still incomplete, invalid bytes at the
end, or a token's own U+FFFD) is held back with its bytes, as the stream decoder holds back its ids
(tests/pipeline/test_byte_decode.py holds the two to each other on the Qwen3 tokenizer).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

REPLACEMENT = "\ufffd"


def _alphabet() -> dict[str, str]:
    """The byte-level alphabet: its char for each byte -> that byte, as a latin-1 char."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {chr(b): chr(b) for b in printable}
    others = [b for b in range(256) if b not in set(printable)]
    chars.update({chr(256 + n): chr(b) for n, b in enumerate(others)})
    return chars


_TO_BYTES = str.maketrans(_alphabet())
_ALPHABET_DROPPED = str.maketrans(dict.fromkeys(_alphabet()))


def token_bytes(token: str) -> bytes:
    """The bytes the `ByteLevel` decoder makes of one token."""
    if token.translate(_ALPHABET_DROPPED):  # a char outside the alphabet: the token's own UTF-8
        return token.encode()
    return token.translate(_TO_BYTES).encode("latin-1")


class ByteTable(dict[int, bytes]):
    """Token id -> its bytes, filled as ids are first seen (at most one entry per id the
    tokenizer knows; an unknown id's nothing is not kept)."""

    __slots__ = ("_id_to_token", "_skipped")

    def __init__(self, id_to_token: Callable[[int], str | None], skipped: Collection[int]) -> None:
        super().__init__()
        self._id_to_token = id_to_token
        self._skipped = skipped  # ids that decode to nothing (special tokens, when skipped)

    def __missing__(self, token_id: int) -> bytes:
        if token_id in self._skipped:
            data = b""
        else:
            token = self._id_to_token(token_id)
            if token is None:
                return b""
            data = token_bytes(token)
        self[token_id] = data
        return data


class ByteStream:
    """One sequence's decoding state; `step` gives the text one more id (or a chunk of ids)
    completes, None if none yet. `tokenizer.SyncDecoder.stream` hands out a byte-level
    tokenizer's `step` as a bound method (CPython 3.11 inlines the call of a bound method; an
    object's `__call__` goes through a slot and a fresh frame)."""

    __slots__ = ("_pending", "_table")

    def __init__(self, table: ByteTable) -> None:
        self._table = table
        self._pending = b""  # the bytes of ids whose text is held back

    def step(self, ids: int | list[int]) -> str | None:
        table = self._table
        if type(ids) is int:
            data = table[ids]
        else:
            data = b"".join([table[i] for i in ids])  # type: ignore[union-attr]
        pending = self._pending
        if pending:
            data = pending + data
            self._pending = b""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = data.decode(errors="replace")
        if text.endswith(REPLACEMENT):  # (a token may also hold a U+FFFD of its own)
            self._pending = data
            return None
        return text or None
