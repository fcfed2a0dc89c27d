"""The byte-level table step (smg/pipeline/byte_decode.py) against the HF tokenizer's own
`DecodeStream` and `decode`, on the real Qwen3 tokenizer: the same text at every step, for any
ids (special, added, lone bytes of split characters, invalid sequences), in any chunks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st
from support.detok import chunk_deltas
from support.examples import examples
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models
from tokenizers.decoders import DecodeStream

from smg.pipeline.byte_decode import ByteStream, ByteTable, token_bytes
from smg.pipeline.detokenize import IncrementalDetokenizer
from smg.pipeline.tokenizer import SyncDecoder, Tokenizer
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

_TOK: list[Tokenizer] = []


def tok() -> Tokenizer:
    if not _TOK:
        _TOK.append(Tokenizer.load(qwen3_tokenizer_dir()))
    return _TOK[0]


INNER: HFTokenizer = tok().decode_sync._inner
ADDED = sorted(INNER.get_added_tokens_decoder())
# the 256 one-byte tokens: the pieces of split characters, and of invalid sequences
ONE_CHAR = [INNER.token_to_id(c) for c in map(chr, [*range(0x21, 0x7F), *range(0xA1, 0x144)])]
BYTES = sorted({i for i in ONE_CHAR if i is not None})
ids_strategy = st.lists(
    st.one_of(st.integers(0, 151642), st.sampled_from(ADDED), st.sampled_from(BYTES)),
    min_size=1,
    max_size=40,
)


class HFStream:
    """Qwen3's decode with the HF `DecodeStream` as its stream decoder (what `SyncDecoder`
    offers a tokenizer that is not byte-level)."""

    def __call__(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return tok().decode_sync(ids, skip_special_tokens)

    def stream(self, skip: bool) -> Callable[[int | list[int]], str | None]:
        return partial(DecodeStream(skip_special_tokens=skip).step, INNER)


def deltas(decode: object, ids: Sequence[int], sizes: Sequence[int], skip: bool) -> list[str]:
    d = IncrementalDetokenizer(decode, skip_special_tokens=skip)  # type: ignore[arg-type]
    out = chunk_deltas(d, ids, sizes)
    assert d.pending == 0
    return out


def test_a_byte_level_tokenizer_streams_by_table() -> None:
    assert isinstance(getattr(tok().decode_sync.stream(True), "__self__", None), ByteStream)
    assert len(BYTES) == 256


@settings(max_examples=examples(150), deadline=None)
@given(ids=ids_strategy, skip=st.booleans())
def test_each_step_gives_what_decode_stream_gives(ids: list[int], skip: bool) -> None:
    ours = tok().decode_sync.stream(skip)
    theirs = DecodeStream(skip_special_tokens=skip)
    for i in ids:
        assert ours(i) == theirs.step(INNER, i)


@settings(max_examples=examples(100), deadline=None)
@given(
    ids=ids_strategy,
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    skip=st.booleans(),
)
def test_chunks_give_the_decode_stream_deltas_and_the_whole_text(
    ids: list[int], sizes: list[int], skip: bool
) -> None:
    by_table = deltas(tok().decode_sync, ids, sizes, skip)
    assert by_table == deltas(HFStream(), ids, sizes, skip)
    assert "".join(by_table) == INNER.decode(ids, skip_special_tokens=skip)


@settings(max_examples=examples(100), deadline=None)
@given(ids=ids_strategy)
def test_the_table_bytes_decode_to_the_tokenizers_text(ids: list[int]) -> None:
    table = ByteTable(INNER.id_to_token, ())
    text = b"".join(table[i] for i in ids).decode(errors="replace")
    assert text == INNER.decode(ids, skip_special_tokens=False)


def test_split_characters_wait_for_their_last_byte() -> None:
    ids = tok().encode_sync("Hello 世界 🎉 done")  # " 🎉" is three tokens in Qwen3
    step = tok().decode_sync.stream(True)
    out = [step(i) for i in ids]
    assert "".join(x or "" for x in out) == "Hello 世界 🎉 done"
    assert None in out  # the emoji's first bytes gave no text


def test_a_token_outside_the_byte_alphabet_is_its_own_utf8() -> None:
    assert token_bytes("ĠHello") == b" Hello"  # Ġ is the space's char in the alphabet
    assert token_bytes("<think>") == b"<think>"
    assert token_bytes("a b") == b"a b"  # a literal space is not in the alphabet
    assert token_bytes("é") == "é".encode("latin-1")  # U+00E9 stands for the byte 0xE9


def test_unknown_ids_decode_to_nothing_and_are_not_kept() -> None:
    table = ByteTable(INNER.id_to_token, ())
    assert table[10**7] == b"" and len(table) == 0
    assert table[9707] == b"Hello" and len(table) == 1
    skipped = ByteTable(INNER.id_to_token, {151645})
    assert skipped[151645] == b"" and ByteTable(INNER.id_to_token, ())[151645] == b"<|im_end|>"


def test_other_decoders_keep_the_hf_stream_decoder() -> None:
    word = HFTokenizer(models.WordLevel({"hi": 0, "there": 1, "[UNK]": 2}, unk_token="[UNK]"))
    step = SyncDecoder(word, frozenset()).stream(True)
    assert not isinstance(getattr(step, "__self__", None), ByteStream)
    assert step(0) == "hi"
