"""TokenizerRegistryActor: which tokenizer (and chat template) serves which model.

gRPC engines see only token ids, so a model is servable once its tokenizer is loaded, by the
first worker of that model to become healthy, from the first of: the worker's own
`tokenizer_path` (or `model_path`) label, `--tokenizer-path`, `--model-path` (each a folder or a
Hugging Face id in the local cache: smg.pipeline.tokenizer_source; a local path that does not
exist falls through, as in the Rust gateway), else the engine itself
(GetTokenizer, verified by sha256, cached on disk) unless `--disable-tokenizer-autoload`. The
chat template: the worker's `chat_template` label, else `--chat-template`, else the tokenizer's.
Loading runs in a thread; the request path reads the published `{model: Tokenizer}` snapshot.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from smg.actors.runtime import Actor
from smg.config import ConfigError, TokenizerConfig
from smg.core.snapshots import SnapshotCell
from smg.pipeline.token_cache import TokenCache, TokenCacheConfig
from smg.pipeline.tokenizer import Tokenizer
from smg.pipeline.tokenizer_download import TokenizerSource, fetch_tokenizer
from smg.pipeline.tokenizer_source import (
    NoSuchPath,
    resolve_tokenizer_dir,
    worker_tokenizer_problem,
)

log = structlog.get_logger("smg.tokenizers")


@dataclass(frozen=True, slots=True)
class EnsureTokenizer:
    model_id: str
    source: TokenizerSource | None = None  # the engine to fetch from when no local path is set
    tokenizer_path: str | None = None  # the worker's own (a folder or a Hugging Face id)
    chat_template: str | None = None  # the worker's own template file


class NoTokenizer(LookupError):
    """A model with no tokenizer to load: no local path and the engine may not be asked."""


def check_tokenizer_flags(tok: TokenizerConfig) -> None:
    """`--tokenizer-path` naming a Hugging Face id this machine's cache lacks (nothing is
    downloaded), or a folder without a tokenizer, and a missing `--chat-template` stop the start;
    a local path that does not exist is left to the engines' tokenizers, and `--model-path`
    problems only warn (HTTP workers need no tokenizer), as in the Rust gateway."""
    flags = {"tokenizer_path": tok.tokenizer_path or "", "chat_template": tok.chat_template or ""}
    problem = worker_tokenizer_problem(flags)
    if problem is not None:
        raise ConfigError(problem)
    if tok.model_path and not tok.tokenizer_path:
        problem = worker_tokenizer_problem({"model_path": tok.model_path})
        if problem is not None:
            log.warning("model_path_tokenizer_missing", problem=problem)


def cache_config(cfg: TokenizerConfig) -> TokenCacheConfig:
    return TokenCacheConfig(
        tokenizer_cache_enable_l0=cfg.tokenizer_cache_enable_l0,
        tokenizer_cache_l0_max_entries=cfg.tokenizer_cache_l0_max_entries,
        tokenizer_cache_l0_max_memory=cfg.tokenizer_cache_l0_max_memory,
        tokenizer_cache_enable_l1=cfg.tokenizer_cache_enable_l1,
        tokenizer_cache_l1_max_memory=cfg.tokenizer_cache_l1_max_memory,
    )


class TokenizerRegistryActor(Actor):
    def __init__(
        self,
        cell: SnapshotCell[dict[str, Tokenizer]],
        cfg: TokenizerConfig,
        executor: Executor | None = None,
    ) -> None:
        super().__init__()
        self.cell = cell
        self.cfg = cfg
        self.executor = executor
        self._by_path: dict[tuple[Path, str | None], Tokenizer] = {}

    async def on_stop(self) -> None:
        for base in self._by_path.values():
            base.close()  # the loaded tokenizers own their thread pools
        self._by_path.clear()

    async def handle(self, message: Any) -> Any:
        match message:
            case EnsureTokenizer() as ask:
                return await self._ensure(ask)
            case _:
                raise TypeError(f"TokenizerRegistryActor: unexpected message {message!r}")

    async def _ensure(self, ask: EnsureTokenizer) -> Tokenizer:
        model = ask.model_id
        current = self.cell.value.get(model)
        if current is not None:
            return current
        cfg = self.cfg
        local = ask.tokenizer_path or cfg.tokenizer_path or cfg.model_path
        template = ask.chat_template or cfg.chat_template
        path: Path | None = None
        fetch = ask.source is not None and not cfg.disable_tokenizer_autoload
        if local is not None:
            try:
                path = await asyncio.to_thread(resolve_tokenizer_dir, local)
            except NoSuchPath:
                if not fetch:
                    raise
                log.warning("tokenizer_path_missing_using_engine", model=model, path=local)
        if path is None:
            if not fetch or ask.source is None:
                why = " (--disable-tokenizer-autoload)" if cfg.disable_tokenizer_autoload else ""
                raise NoTokenizer(f"no tokenizer source for model {model!r}{why}")
            root = Path(cfg.tokenizer_cache_dir) if cfg.tokenizer_cache_dir else None
            path = await fetch_tokenizer(ask.source, root)
        base = self._by_path.get((path, template))
        if base is None:
            base = await Tokenizer.load_async(
                path, executor=self.executor, chat_template_override=template
            )
            self._by_path[(path, template)] = base
            log.info("tokenizer_loaded", model=model, path=str(path))
        cache_cfg = cache_config(cfg)
        tok = base.with_cache(TokenCache(cache_cfg) if cache_cfg.enabled else None)
        self.cell.publish({**self.cell.value, model: tok})
        return tok
