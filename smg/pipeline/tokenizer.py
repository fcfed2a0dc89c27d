"""The tokenizer shell: loads a Hugging Face `tokenizer.json` and keeps the event loop free.

`tokenizers.Tokenizer.encode` holds the GIL for its whole run (a long prompt stalls the loop for
~20 ms), while `encode_batch` / `decode_batch` release it. So `encode` looks the text up in the
(pure) `TokenCache` on the loop, tokenizes what is left with `encode_batch([text])` in a thread
pool, and stores the result back on the loop: the cache is only touched by the loop thread and
needs no lock. Short inputs are handled inline, where a thread hop would cost more than the work.
Both use `encode_batch_fast` (tokenizers >= 0.21) where there is one: the same ids, without the
character offsets nobody here reads (~20 % less: 25 against 31 µs for a 70-character chat
prompt, the tiny bench tokenizer).

The pool is the caller's `executor`, or else one of our own (`default_pool_size()` threads: all
CPUs but one, so the loop keeps a core) that `close()` shuts down. It is kept apart from the
loop's default executor, which aiohttp needs for DNS lookups.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers.decoders import ByteLevel, DecodeStream  # tokenizers >= 0.21

from smg.pipeline.byte_decode import ByteStream, ByteTable
from smg.pipeline.chat_template import ChatTemplate, TemplateError
from smg.pipeline.token_cache import TokenCache

# Measured on the Qwen3 tokenizer: ~60 us to encode 256 characters inline, about the cost of a
# round trip through the thread pool; above that the pool wins and the loop stays responsive.
INLINE_ENCODE_MAX_CHARS = 256
INLINE_DECODE_MAX_IDS = 256
# End-of-turn markers that generation_config.json lists as eos for ChatML models (Qwen).
CHATML_EOS = ("<|im_end|>", "<|endoftext|>")


def default_pool_size() -> int:
    """Tokenizer threads: every CPU this process may use but one, at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 2
    return max(1, cpus - 1)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _token_content(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class SyncDecoder:
    """`Tokenizer.decode_sync`: inline decode for the small windows of incremental
    detokenization, and `stream`, a sequence's incremental decoder (smg.pipeline.detokenize
    uses it when offered). `special_ids`: the tokenizer's special tokens (skipped or not)."""

    __slots__ = ("_inner", "_tables")

    def __init__(self, inner: HFTokenizer, special_ids: Collection[int]) -> None:
        self._inner = inner
        # a byte-level tokenizer's ids -> bytes, without and with its special tokens skipped
        # (byte_decode.py: a table step instead of DecodeStream's); None for other decoders
        self._tables: tuple[ByteTable, ByteTable] | None = None
        if isinstance(inner.decoder, ByteLevel):
            to_token = inner.id_to_token
            self._tables = (ByteTable(to_token, ()), ByteTable(to_token, special_ids))

    def __call__(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        text: str = self._inner.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    def stream(self, skip_special_tokens: bool) -> Callable[[int], str | None]:
        """A fresh step for one sequence: by table for a byte-level tokenizer, else the HF
        tokenizer's `DecodeStream`."""
        if self._tables is not None:
            return ByteStream(self._tables[skip_special_tokens]).step
        return partial(DecodeStream(skip_special_tokens=skip_special_tokens).step, self._inner)


class Tokenizer:
    """One model's tokenizer, chat template and token cache."""

    def __init__(
        self,
        inner: HFTokenizer,
        *,
        config: dict[str, Any] | None = None,
        generation_config: dict[str, Any] | None = None,
        chat_template: ChatTemplate | None = None,
        cache: TokenCache | None = None,
        executor: Executor | None = None,
        path: Path | None = None,
    ) -> None:
        self._inner = inner
        added = inner.get_added_tokens_decoder()
        self._special_ids = frozenset(i for i, tok in added.items() if tok.special)
        self.decode_sync = SyncDecoder(inner, self._special_ids)
        # the ids without the offsets (tokenizers >= 0.21), else the offsets too
        self._encode_batch = getattr(inner, "encode_batch_fast", inner.encode_batch)
        self._config = dict(config or {})
        self._generation_config = dict(generation_config or {})
        self._owns_executor = executor is None
        self._executor: Executor = executor or ThreadPoolExecutor(
            default_pool_size(), thread_name_prefix="smg-tokenize"
        )
        self.path = path
        self.chat_template = chat_template
        self.cache = cache
        self._eos_ids = self._find_eos(config or {}, generation_config or {})
        if cache is not None:
            # Only atomic special tokens are safe split points for the L1 prefix cache.
            cache.set_boundary_tokens(
                {
                    tok.content: i
                    for i, tok in added.items()
                    if tok.special and not (tok.lstrip or tok.rstrip or tok.single_word)
                }
            )

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        cache: TokenCache | None = None,
        executor: Executor | None = None,
        chat_template_override: str | Path | None = None,
    ) -> Tokenizer:
        """Load `tokenizer.json` (+ tokenizer_config.json, generation_config.json) from a folder.
        Blocking (~0.5 s for a 150k vocabulary): call at startup or via `load_async`."""
        folder = Path(path)
        inner = HFTokenizer.from_file(str(folder / "tokenizer.json"))
        try:
            template: ChatTemplate | None = ChatTemplate.from_tokenizer_dir(
                folder, chat_template_override
            )
        except TemplateError:
            if chat_template_override is not None:
                raise
            template = None  # a base model without a template can still tokenize text
        return cls(
            inner,
            config=_read_json(folder / "tokenizer_config.json"),
            generation_config=_read_json(folder / "generation_config.json"),
            chat_template=template,
            cache=cache,
            executor=executor,
            path=folder,
        )

    @classmethod
    async def load_async(
        cls,
        path: str | Path,
        *,
        cache: TokenCache | None = None,
        executor: Executor | None = None,
        chat_template_override: str | Path | None = None,
    ) -> Tokenizer:
        """`load` in a worker thread, for loading while the gateway is serving."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            executor,
            lambda: cls.load(
                path, cache=cache, executor=executor, chat_template_override=chat_template_override
            ),
        )

    def with_cache(
        self, cache: TokenCache | None, *, executor: Executor | None = None
    ) -> Tokenizer:
        """Another shell over the same loaded tokenizer and template, with its own cache (and
        its own executor if given, else this shell's)."""
        return Tokenizer(
            self._inner,
            config=self._config,
            generation_config=self._generation_config,
            chat_template=self.chat_template,
            cache=cache,
            executor=executor or self._executor,  # shared: this shell still owns its pool
            path=self.path,
        )

    def _find_eos(self, config: dict[str, Any], gen: dict[str, Any]) -> tuple[int, ...]:
        ids: list[int] = []

        def add(token_id: int | None) -> None:
            if token_id is not None and token_id not in ids:
                ids.append(token_id)

        eos = _token_content(config.get("eos_token"))
        if eos is not None:
            add(self._inner.token_to_id(eos))
        gen_eos = gen.get("eos_token_id")
        for token_id in gen_eos if isinstance(gen_eos, list) else [gen_eos]:
            if isinstance(token_id, int):
                add(token_id)
        for marker in CHATML_EOS:
            token_id = self._inner.token_to_id(marker)
            if token_id in self._special_ids:
                add(token_id)
        return tuple(ids)

    def close(self) -> None:
        """Shut down the thread pool if this shell created it (idempotent)."""
        if self._owns_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- properties --------------------------------------------------------------------------

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Ids that end generation: config eos, generation_config eos, ChatML end markers."""
        return self._eos_ids

    @property
    def special_token_ids(self) -> frozenset[int]:
        return self._special_ids

    @property
    def vocab_size(self) -> int:
        """Including added tokens (the highest id + 1 for Qwen3)."""
        return int(self._inner.get_vocab_size(with_added_tokens=True))

    def id_to_token(self, token_id: int) -> str | None:
        return self._inner.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        return self._inner.token_to_id(token)

    # -- encode ------------------------------------------------------------------------------

    def _encode_now(self, text: str, add_special_tokens: bool) -> list[int]:
        # encode_batch releases the GIL while the Rust side works; encode would not.
        ids: list[int] = self._encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
        return ids

    async def _encode_raw(self, text: str, add_special_tokens: bool) -> list[int]:
        if len(text) <= INLINE_ENCODE_MAX_CHARS:
            return self._encode_now(text, add_special_tokens)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._encode_now, text, add_special_tokens
        )

    async def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids for `text`, from the cache when possible, else tokenized off the loop."""
        cache = self.cache
        if cache is None:
            if len(text) <= INLINE_ENCODE_MAX_CHARS:  # `_encode_now` inline, two calls fewer
                encoded = self._encode_batch([text], add_special_tokens=add_special_tokens)
                return encoded[0].ids
            return await self._encode_raw(text, add_special_tokens)
        probe = cache.probe(text, add_special_tokens)
        if probe.ids is not None:
            return probe.ids
        suffix = text[probe.prefix_chars :]
        ids = probe.prefix_ids
        if suffix:
            ids = ids + await self._encode_raw(suffix, add_special_tokens)
        cache.complete(probe, ids)
        return ids

    def encode_sync(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Uncached, on the calling thread (tests, benchmarks, worker threads)."""
        return self._encode_now(text, add_special_tokens)

    # -- decode ------------------------------------------------------------------------------

    def _decode_now(self, ids: list[int], skip_special_tokens: bool) -> str:
        text: str = self._inner.decode_batch([ids], skip_special_tokens=skip_special_tokens)[0]
        return text

    async def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text for `ids`; long inputs are decoded in the thread pool."""
        if len(ids) <= INLINE_DECODE_MAX_IDS:
            return self.decode_sync(ids, skip_special_tokens)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._decode_now, list(ids), skip_special_tokens
        )
