"""IncrementalDetokenizer with the HF tokenizer's own stream decoder (`SyncDecoder.stream`,
tokenizers' DecodeStream) against its Python windows, on the real Qwen3 tokenizer: the same text
for any ids, special or not, in any chunks, and the windows taking over where a stream decoder
fails."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from support.detok import chunk_deltas, feed_in_chunks
from support.examples import examples

from smg.pipeline.detokenize import IncrementalDetokenizer
from smg.pipeline.tokenizer import Tokenizer
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

_TOK: list[Tokenizer] = []


def tok() -> Tokenizer:
    if not _TOK:
        _TOK.append(Tokenizer.load(qwen3_tokenizer_dir()))
    return _TOK[0]


def windows_only(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    """The same decode without `stream`: the detokenizer's Python windows."""
    return tok().decode_sync(ids, skip_special_tokens)


def deltas(decode: object, ids: Sequence[int], sizes: Sequence[int], skip: bool) -> list[str]:
    """What each chunk's `feed` gave, then `finish`."""
    d = IncrementalDetokenizer(decode, skip_special_tokens=skip)  # type: ignore[arg-type]
    out = chunk_deltas(d, ids, sizes)
    assert d.pending == 0 and d.ids == list(ids)
    return out


def run(decode: object, ids: Sequence[int], sizes: Sequence[int], skip: bool) -> str:
    d = IncrementalDetokenizer(decode, skip_special_tokens=skip)  # type: ignore[arg-type]
    return feed_in_chunks(d, ids, sizes)


def test_the_real_tokenizer_offers_its_stream_decoder() -> None:
    d = IncrementalDetokenizer(tok().decode_sync)
    assert d.feed([9707]) == "Hello" and d._step is not None
    w = IncrementalDetokenizer(windows_only)
    assert w.feed([9707]) == "Hello" and w._step is None
    whole = IncrementalDetokenizer(tok().decode_sync)  # a whole answer: one feed, then finish
    assert whole.feed([9707, 11], last=True) == "Hello," and whole._step is None


SPECIAL = sorted(i for i, t in tok().decode_sync._inner.get_added_tokens_decoder().items())
ids_strategy = st.lists(
    st.one_of(st.integers(0, 151642), st.sampled_from(SPECIAL)), min_size=1, max_size=40
)


@settings(max_examples=examples(100), deadline=None)
@given(
    ids=ids_strategy,
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    skip=st.booleans(),
)
def test_stream_decoder_gives_the_windows_text(
    ids: list[int], sizes: list[int], skip: bool
) -> None:
    full = tok().decode_sync(ids, skip)
    streamed = deltas(tok().decode_sync, ids, sizes, skip)
    assert "".join(streamed) == full
    assert streamed == deltas(windows_only, ids, sizes, skip)  # the same delta per chunk


class FailingStream:
    """A decode function whose stream decoder raises at its `fail_at`-th id."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at

    def __call__(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return tok().decode_sync(ids, skip_special_tokens)

    def stream(self, skip: bool) -> Callable[[int | list[int]], str | None]:
        real = tok().decode_sync.stream(skip)
        seen = [0]

        def step(i: int | list[int]) -> str | None:
            seen[0] += 1
            if seen[0] == self.fail_at:
                raise RuntimeError("InvalidPrefix")
            return real(i)

        return step


@settings(max_examples=examples(50), deadline=None)
@given(
    ids=ids_strategy,
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    fail_at=st.integers(1, 40),
)
def test_the_windows_take_over_where_the_stream_decoder_fails(
    ids: list[int], sizes: list[int], fail_at: int
) -> None:
    assert run(FailingStream(fail_at), ids, sizes, True) == tok().decode_sync(ids)


def test_a_failed_stream_decoder_is_dropped_for_the_windows() -> None:
    text = "Emoji 🎉 and 你好, then plain words to the end."
    ids = tok().encode_sync(text)
    for sizes in ([1], [3, 2]):
        decode = FailingStream(fail_at=4)
        d = IncrementalDetokenizer(decode)
        assert feed_in_chunks(d, ids, sizes) == text
        assert d._step is None  # the windows finished the sequence
