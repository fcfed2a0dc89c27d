"""Our HPACK decoder against the PyPI `hpack` encoder (python-hyper) as a reference.

The gateway keeps its own decoder (bench/hpack_cost.py: 2.4 us per Generate call against 10.7 us
for PyPI `hpack`), so it is held to the reference here: any sequence of header lists, encoded
with Huffman or not, with the dynamic table filling, evicting and resized between blocks, must
decode to what was encoded."""

from __future__ import annotations

import hpack as reference
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.backends import hpack

NAMES = st.sampled_from([":status", "content-type", "grpc-status", "grpc-message", "x-a", "x-b"])
LATIN1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=60)
HEADER_LISTS = st.lists(st.lists(st.tuples(NAMES | st.text("abcxyz-", min_size=1), LATIN1),
                                 max_size=8), min_size=1, max_size=12)  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(
    lists=HEADER_LISTS,
    huffman=st.booleans(),
    sizes=st.lists(st.sampled_from([None, 0, 64, 256, 4096]), min_size=12, max_size=12),
)
def test_decodes_what_the_reference_encodes(
    lists: list[list[tuple[str, str]]], huffman: bool, sizes: list[int | None]
) -> None:
    encoder, decoder = reference.Encoder(), hpack.Decoder()
    for headers, size in zip(lists, sizes, strict=False):
        if size is not None:
            encoder.header_table_size = size  # a size update starts the next block
        block = encoder.encode([(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers],
                               huffman=huffman)  # fmt: skip
        assert decoder.decode(block, 1 << 20) == headers


def test_a_repeated_block_decodes_per_the_table_it_meets() -> None:
    def literal(text: str) -> bytes:
        return bytes([len(text)]) + text.encode()

    decoder = hpack.Decoder()
    newest = bytes([0x80 | 62])  # indexed: the dynamic table's newest entry
    assert decoder.decode(b"\x40" + literal("x-a") + literal("1")) == [("x-a", "1")]
    assert decoder.decode(newest) == decoder.decode(newest) == [("x-a", "1")]  # (kept)
    got = decoder.decode(newest)
    got.append(("mine", "to change"))  # each decode's list is the caller's
    assert decoder.decode(newest) == [("x-a", "1")]
    decoder.decode(b"\x40" + literal("x-a") + literal("2"))  # the table changed ...
    assert decoder.decode(newest) == [("x-a", "2")]  # ... the same bytes mean what it says now
    with pytest.raises(hpack.HeaderListTooLarge):
        decoder.decode(newest, 10)  # a tighter bound is checked, not remembered
    decoder.decode(b"\x20")  # a table size update to 0: the table is empty
    with pytest.raises(hpack.HpackError):
        decoder.decode(newest)
