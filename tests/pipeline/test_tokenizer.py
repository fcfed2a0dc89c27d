"""Tokenizer shell on the real Qwen3 files: ids, eos/special ids, offloading, the cache."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from smg.pipeline.token_cache import TokenCache, TokenCacheConfig
from smg.pipeline.tokenizer import INLINE_ENCODE_MAX_CHARS, Tokenizer
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

IM_START, IM_END, EOT = 151644, 151645, 151643
_SHARED: dict[str, Tokenizer] = {}


def shared() -> Tokenizer:
    if "t" not in _SHARED:
        _SHARED["t"] = Tokenizer.load(qwen3_tokenizer_dir())
    return _SHARED["t"]


class CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.calls = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.calls += 1
        return super().submit(fn, *args, **kwargs)


def with_cache(cache: TokenCache | None, executor: Any = None) -> Tokenizer:
    """A second shell over the already-loaded tokenizer (loading again costs ~0.5 s)."""
    return shared().with_cache(cache, executor=executor)


def test_properties() -> None:
    t = shared()
    assert t.eos_token_ids == (IM_END, EOT)
    assert {IM_START, IM_END, EOT} <= t.special_token_ids
    assert t.token_to_id("<think>") not in t.special_token_ids  # an added, non-special token
    assert t.vocab_size == 151669
    assert t.id_to_token(IM_END) == "<|im_end|>"
    assert t.chat_template is not None


async def test_encode_decode_round_trip() -> None:
    t = shared()
    short = "Hello, 世界 🎉"
    long = short * 200
    for text in (short, long):
        ids = await t.encode(text)
        assert ids == t.encode_sync(text)
        assert await t.decode(ids) == text
    ids = await t.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == IM_START and ids[-1] == IM_END
    assert await t.decode(ids) == "user\nhi"
    assert await t.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|>"
    assert await t.decode(ids * 200) == "user\nhi" * 200  # the pooled path


async def test_encode_gives_the_ids_of_the_library_encode() -> None:
    """The shell encodes without offsets (`encode_batch_fast`): the ids are the library's
    `encode`'s, inline or in the pool, special tokens and `add_special_tokens` included."""
    t = with_cache(None)
    inner = t._inner
    texts = (
        "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n",
        "  leading spaces, 世界, tabs\t and \r\n newlines 🎉",
        "",
    )
    for text in (*texts, texts[0] * 20, texts[1] * 20):  # the last two: the pool's path
        for special in (False, True):
            want = inner.encode(text, add_special_tokens=special).ids
            assert await t.encode(text, add_special_tokens=special) == want
            assert t.encode_sync(text, add_special_tokens=special) == want


async def test_long_inputs_go_to_the_pool_short_ones_stay_inline() -> None:
    with CountingExecutor() as pool:
        t = with_cache(None, pool)
        await t.encode("x" * INLINE_ENCODE_MAX_CHARS)
        assert pool.calls == 0
        await t.encode("x " * INLINE_ENCODE_MAX_CHARS)
        assert pool.calls == 1
        await t.decode(list(range(1000, 1600)))
        assert pool.calls == 2


async def test_cached_encode_multi_turn() -> None:
    cfg = TokenCacheConfig(tokenizer_cache_enable_l0=True, tokenizer_cache_enable_l1=True)
    cache = TokenCache(cfg)
    with CountingExecutor() as pool:
        t = with_cache(cache, pool)
        assert t.chat_template is not None
        msgs: list[dict[str, str]] = [{"role": "system", "content": "You help. " * 40}]
        for turn in range(6):
            msgs.append({"role": "user", "content": f"Question {turn}: " + "why? " * 60})
            text = t.chat_template.render(msgs)
            assert await t.encode(text) == t.encode_sync(text)
            assert await t.encode(text) == t.encode_sync(text)  # an L0 hit
            msgs.append({"role": "assistant", "content": f"Answer {turn}. " * 30})
    s = cache.stats()
    assert s.l0_hits == 6
    assert s.l1_hits == 5 and s.misses == 1
    assert s.saved_tokens > 0
    assert s.l1_entries == 1  # each turn superseded the previous one


async def test_add_special_tokens_bypasses_l1() -> None:
    cache = TokenCache(TokenCacheConfig(tokenizer_cache_enable_l1=True))
    t = with_cache(cache)
    text = "<|im_start|>user\nhello<|im_end|>\n" * 100
    assert await t.encode(text, add_special_tokens=True) == t.encode_sync(
        text, add_special_tokens=True
    )
    assert cache.stats().l1_boundaries == 0


def test_a_cache_serves_one_tokenizer_only() -> None:
    cache = TokenCache(TokenCacheConfig(tokenizer_cache_enable_l1=True), {"<q>": 1})
    with pytest.raises(ValueError):
        with_cache(cache)


async def test_load_async_and_folder_without_template(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").symlink_to(qwen3_tokenizer_dir() / "tokenizer.json")
    t = await Tokenizer.load_async(tmp_path)
    assert t.chat_template is None
    assert t.eos_token_ids == (IM_END, EOT)  # ChatML markers, without any config
    assert await t.encode("hi") == shared().encode_sync("hi")
    t.close()
