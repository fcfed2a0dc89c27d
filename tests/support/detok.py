"""Feeding an IncrementalDetokenizer the way an engine's chunks come."""

from __future__ import annotations

from collections.abc import Sequence

from smg.pipeline.detokenize import IncrementalDetokenizer


def chunk_deltas(d: IncrementalDetokenizer, ids: Sequence[int], sizes: Sequence[int]) -> list[str]:
    """`ids` fed in chunks of `sizes` (cycled), then `finish`: what each call gave."""
    out, i, k = [], 0, 0
    while i < len(ids):
        n = sizes[k % len(sizes)]
        out.append(d.feed(ids[i : i + n]))
        i, k = i + n, k + 1
    out.append(d.finish())
    return out


def feed_in_chunks(d: IncrementalDetokenizer, ids: Sequence[int], sizes: Sequence[int]) -> str:
    """The whole text of `chunk_deltas`."""
    return "".join(chunk_deltas(d, ids, sizes))
