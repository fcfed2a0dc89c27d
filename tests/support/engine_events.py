"""An engine's answer for renderer tests: one character per token id (`decode` is `chr`), cut
into `TokenDelta`s of `chunk` tokens and a `Finished` (7 prompt tokens, 2 of them cached)."""

from __future__ import annotations

from collections.abc import Sequence

from smg.pipeline.engine_types import EngineEvent, Finished, TokenDelta


def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    return "".join(chr(i) for i in ids)


def events_for(text: str, chunk: int, reason: str = "stop") -> list[EngineEvent]:
    ids = [ord(c) for c in text]
    out: list[EngineEvent] = [
        TokenDelta(0, ids[i : i + chunk], 7, min(len(ids), i + chunk), cached_tokens=2)
        for i in range(0, len(ids), chunk)
    ]
    out.append(Finished(0, reason, 7, len(ids)))
    return out
