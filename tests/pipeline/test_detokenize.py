"""IncrementalDetokenizer on the real Qwen3 tokenizer: streamed text equals decode(all ids)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.detok import feed_in_chunks
from support.examples import examples

from smg.pipeline.detokenize import IncrementalDetokenizer
from smg.pipeline.tokenizer import Tokenizer
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

TEXTS = [
    "Hello, world! Ça va? Naïve café, résumé, jalapeño.",
    "你好，世界！今天天气很好。我们去公园散步吧。",  # noqa: RUF001
    "Emoji: 🎉🚀👩‍👩‍👧‍👦🇫🇷 and flags 🏳️‍🌈, ok? 😀😃😄",
    "Mixed: αβγ δ ε — “quotes” ‘single’ … 日本語のテキスト 한국어 텍스트 ✓ ✗ ∑ ∫ ≈",  # noqa: RUF001
    "code:\n```python\ndef f(x):\n    return x ** 2  # squared ✨\n```\n",
]
_TOK: Tokenizer | None = None


def tok() -> Tokenizer:
    global _TOK
    if _TOK is None:
        _TOK = Tokenizer.load(qwen3_tokenizer_dir())
    return _TOK


def stream(ids: Sequence[int], sizes: Sequence[int], skip: bool = True) -> str:
    d = IncrementalDetokenizer(tok().decode_sync, skip_special_tokens=skip)
    return feed_in_chunks(d, ids, sizes)


@pytest.mark.parametrize("text", TEXTS)
def test_one_id_at_a_time_equals_full_decode(text: str) -> None:
    ids = tok().encode_sync(text)
    assert stream(ids, [1]) == tok().decode_sync(ids) == text
    assert stream(ids, [3, 1, 2]) == text


def test_never_emits_partial_characters() -> None:
    ids = tok().encode_sync("🎉你好👩‍👧")
    d = IncrementalDetokenizer(tok().decode_sync)
    pieces = [d.feed([i]) for i in ids] + [d.finish()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == "🎉你好👩‍👧"
    assert any(p == "" for p in pieces)  # some tokens carried only part of a character


@settings(max_examples=examples(60), deadline=None)
@given(
    words=st.lists(st.sampled_from(" ".join(TEXTS).split(" ")), min_size=1, max_size=30),
    seed=st.integers(0, 2**16),
)
def test_random_texts_random_chunks(words: list[str], seed: int) -> None:
    text = " ".join(words)
    ids = tok().encode_sync(text)
    sizes = [random.Random(seed).randint(1, 4) for _ in range(8)]
    assert stream(ids, [1]) == text
    assert stream(ids, sizes) == text


@settings(max_examples=examples(100), deadline=None)
@given(ids=st.lists(st.integers(0, 151642), min_size=1, max_size=40))
def test_arbitrary_id_sequences(ids: list[int]) -> None:
    # Random ids include lone UTF-8 fragments: the stream must still equal the full decode,
    # with U+FFFD exactly where the full decode has it.
    assert stream(ids, [1]) == tok().decode_sync(ids)
    assert stream(ids, [2, 1, 3]) == tok().decode_sync(ids)


def test_special_tokens_skipped_or_kept() -> None:
    t = tok()
    ids = t.encode_sync("<|im_start|>assistant\nHi 🎉<|im_end|>")
    assert stream(ids, [1]) == "assistant\nHi 🎉"
    assert stream(ids, [1], skip=False) == "<|im_start|>assistant\nHi 🎉<|im_end|>"


def test_invalid_trailing_bytes_flushed_as_replacement() -> None:
    t = tok()
    head = t.encode_sync("ok ")
    char = t.encode_sync("🫠")
    assert len(char) == 3  # one character over three byte-level tokens
    d = IncrementalDetokenizer(t.decode_sync)
    assert d.feed(head) == "ok "
    assert d.feed(char[:1]) == ""  # incomplete: held back
    assert d.feed(char[1:2]) == ""
    assert d.pending == 2
    tail = d.finish()  # the stream ended mid-character
    assert tail and set(tail) == {"\ufffd"}
    assert "ok " + tail == t.decode_sync(head + char[:2])
    assert d.finish() == ""


def test_completed_character_after_hold() -> None:
    t = tok()
    d = IncrementalDetokenizer(t.decode_sync)
    char = t.encode_sync("🫠!")
    assert [d.feed([i]) for i in char] == ["", "", "🫠", "!"]


def test_window_stays_small() -> None:
    # The decode windows do not grow with the length of the stream: O(1) work per token.
    t = tok()
    ids = t.encode_sync(" ".join(TEXTS) * 20)
    widths: list[int] = []

    def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        widths.append(len(ids))
        return t.decode_sync(ids, skip_special_tokens)

    d = IncrementalDetokenizer(decode)
    out = "".join(d.feed([i]) for i in ids) + d.finish()
    assert out == t.decode_sync(ids)
    assert len(ids) > 1000
    assert max(widths) <= 8
