"""Stop strings over a text stream (pure; no IO).

The matcher emits text as soon as it cannot be part of a stop string. It holds back the longest
suffix of the pending text that is a proper prefix of some stop string, so a stop string never
leaks out partially, whatever the chunking. Any stop occurrence that completes later must start
inside that held-back suffix, which is what makes the result chunk-invariant.

Which stop wins: the one that *completes* first (a stream stops as soon as any stop string is
complete); among those ending at the same place, the longest. Text before the stop is emitted
(plus the stop itself with `include_stop`); after a stop nothing more is emitted.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    """Feed text deltas; get back what is safe to emit and whether a stop string matched."""

    __slots__ = ("_held", "_include", "_matched", "_max_held", "_prefixes", "_stops")

    def __init__(self, stops: Sequence[str], include_stop: bool = False) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stops if s))
        self._include = include_stop
        self._prefixes = frozenset(s[:i] for s in self._stops for i in range(1, len(s)))
        self._max_held = max((len(s) - 1 for s in self._stops), default=0)
        self._held = ""
        self._matched: str | None = None

    @property
    def stopped(self) -> bool:
        return self._matched is not None

    @property
    def matched(self) -> str | None:
        return self._matched

    def _first_match(self, text: str) -> tuple[int, str] | None:
        """(start, stop) of the stop occurrence that ends first, ties to the longest."""
        best: tuple[int, str] | None = None
        best_end = 0
        for stop in self._stops:
            start = text.find(stop)
            if start < 0:
                continue
            end = start + len(stop)
            if best is None or end < best_end or (end == best_end and start < best[0]):
                best, best_end = (start, stop), end
        return best

    def _hold_len(self, text: str) -> int:
        for k in range(min(len(text), self._max_held), 0, -1):
            if text[-k:] in self._prefixes:
                return k
        return 0

    def feed(self, text: str) -> tuple[str, bool, str | None]:
        """Returns (text to emit, stopped, the stop string that matched or None)."""
        if self._matched is not None:
            return "", True, self._matched
        if not self._stops:
            return text, False, None
        pending = self._held + text
        found = self._first_match(pending)
        if found is not None:
            start, stop = found
            self._matched, self._held = stop, ""
            emit = pending[: start + len(stop)] if self._include else pending[:start]
            return emit, True, stop
        keep = self._hold_len(pending)
        self._held = pending[len(pending) - keep :]
        return pending[: len(pending) - keep], False, None

    def finish(self) -> str:
        """At the end of the stream without a match: release the held-back text."""
        held, self._held = self._held, ""
        return "" if self._matched is not None else held
