"""TokenizerRegistryActor: which tokenizer (and chat template) serves which model.

gRPC engines see only token ids, so a model is servable once its tokenizer is loaded: from
`--tokenizer-path`/`--model-path` when given, else fetched from the engine (GetTokenizer, verified
by sha256, cached on disk) by the first worker of that model to register. Loading runs in a
thread; the request path reads the published `{model: Tokenizer}` snapshot.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from smg.actors.runtime import Actor
from smg.config import TokenizerConfig
from smg.core.snapshots import SnapshotCell
from smg.pipeline.token_cache import TokenCache, TokenCacheConfig
from smg.pipeline.tokenizer import Tokenizer
from smg.pipeline.tokenizer_download import TokenizerSource, fetch_tokenizer

log = structlog.get_logger("smg.tokenizers")


@dataclass(frozen=True, slots=True)
class EnsureTokenizer:
    model_id: str
    source: TokenizerSource | None = None  # the engine to fetch from when no local path is set


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
        self._by_path: dict[Path, Tokenizer] = {}

    async def on_stop(self) -> None:
        for base in self._by_path.values():
            base.close()  # the loaded tokenizers own their thread pools
        self._by_path.clear()

    async def handle(self, message: Any) -> Any:
        match message:
            case EnsureTokenizer(model_id=model, source=source):
                return await self._ensure(model, source)
            case _:
                raise TypeError(f"TokenizerRegistryActor: unexpected message {message!r}")

    async def _ensure(self, model: str, source: TokenizerSource | None) -> Tokenizer:
        current = self.cell.value.get(model)
        if current is not None:
            return current
        local = self.cfg.tokenizer_path or self.cfg.model_path
        if local is not None:
            path = Path(local)
        elif source is not None:
            root = Path(self.cfg.tokenizer_cache_dir) if self.cfg.tokenizer_cache_dir else None
            path = await fetch_tokenizer(source, root)
        else:
            raise LookupError(f"no tokenizer source for model {model!r}")
        base = self._by_path.get(path)
        if base is None:
            base = await Tokenizer.load_async(
                path, executor=self.executor, chat_template_override=self.cfg.chat_template
            )
            self._by_path[path] = base
            log.info("tokenizer_loaded", model=model, path=str(path))
        cache_cfg = cache_config(self.cfg)
        tok = base.with_cache(TokenCache(cache_cfg) if cache_cfg.enabled else None)
        self.cell.publish({**self.cell.value, model: tok})
        return tok
