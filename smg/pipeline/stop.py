"""Stop strings over a text stream (pure; no IO).

The matcher emits text as soon as it cannot be part of a stop string. It holds back the longest
suffix of the pending text that is a proper prefix of some stop string, so a stop string never
leaks out partially, whatever the chunking. Any stop occurrence that completes later must start
inside that held-back suffix, which is what makes the result chunk-invariant.

Which stop wins: the one that *completes* first (a stream stops as soon as any stop string is
complete); among those ending at the same place, the longest. Text before the stop is emitted
(plus the stop itself with `include_stop`); after a stop nothing more is emitted.

Cost. All the stop strings of a request make one Aho-Corasick automaton (`StopAutomaton`), built
once per request in O(total stop length) and shared by its choices; a choice's matcher is just a
state number and the held-back text. The state *is* the held-back suffix (its depth), so a feed
costs O(len(text)) amortised whatever the number and length of the stop strings, plus a copy of
the held-back text (at most the longest stop string - 1 characters) while a partial match runs
across feeds. Nothing re-scans what was emitted. (Before this, every choice kept the set of all
prefixes of every stop string: quadratic in the stop length, 720 MB for one request with 24 KiB
of stop strings and n=10.) While the automaton is at its root, a compiled character class of the
stop strings' first characters skips the text in C, so ordinary text costs about one regex
search per feed.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable, Sequence

_SHIFT = 21  # an edge's key is state << 21 | ord(char): every code point is below 2**21


class StopAutomaton:
    """The Aho-Corasick automaton over a request's stop strings (immutable once built).

    States are numbers (0 is the root, the empty prefix); edges live in one dict keyed by
    `state << 21 | ord(char)`, which costs far less than a dict per state. Per state: its depth
    (the length of the prefix it stands for), its failure link (the state of the longest proper
    suffix that is also a prefix of some stop string), and the longest stop string that ends
    there, directly or through failure links (None if none does).
    """

    __slots__ = ("depth", "edges", "fail", "hit", "longest", "skip")

    def __init__(self, stops: Sequence[str]) -> None:
        edges: dict[int, int] = {}
        depth = [0]
        term: list[str | None] = [None]
        children: list[list[tuple[int, int]]] = [[]]  # only while building
        for stop in dict.fromkeys(s for s in stops if s):
            state = 0
            for ch in stop:
                key = state << _SHIFT | ord(ch)
                nxt = edges.get(key)
                if nxt is None:
                    nxt = edges[key] = len(depth)
                    depth.append(depth[state] + 1)
                    term.append(None)
                    children.append([])
                    children[state].append((ord(ch), nxt))
                state = nxt
            term[state] = stop
        fail = [0] * len(depth)
        hit: list[str | None] = [None] * len(depth)
        queue = deque(child for _, child in children[0])
        for child in queue:
            hit[child] = term[child]
        while queue:
            state = queue.popleft()
            for code, child in children[state]:
                f = fail[state]
                while f and (f << _SHIFT | code) not in edges:
                    f = fail[f]
                target = edges.get(f << _SHIFT | code, 0)
                fail[child] = target
                hit[child] = term[child] if term[child] is not None else hit[target]
                queue.append(child)
        self.edges = edges
        self.depth = depth
        self.fail = fail
        self.hit = hit
        self.longest = max(depth)
        firsts = "".join(re.escape(chr(code)) for code, _ in children[0])
        self.skip: Callable[[str, int], re.Match[str] | None] = re.compile(f"[{firsts}]").search

    @property
    def states(self) -> int:
        return len(self.depth)


CACHED_STOP_CHARS = 256  # stop sets up to this many characters in all are built once ...
CACHED_STOP_SETS = 64  # ... and the last few of them kept: ~3 MB at most, ~50 KB typically


def compile_stops(stops: Sequence[str]) -> StopAutomaton | None:
    """The automaton for `stops`, or None when there is no (non-empty) stop string.

    Clients send the same few short stop sets again and again (`"\\n\\n"`, chat-template end
    markers): those come from a small LRU cache, as building costs ~1 µs per character."""
    if not any(stops):
        return None
    key = tuple(stops)
    if sum(map(len, key)) <= CACHED_STOP_CHARS:
        return _cached(key)
    return StopAutomaton(key)


@functools.lru_cache(maxsize=CACHED_STOP_SETS)
def _cached(stops: tuple[str, ...]) -> StopAutomaton:
    return StopAutomaton(stops)


class StopMatcher:
    """Feed text deltas; get back what is safe to emit and whether a stop string matched.

    `stops` is either the stop strings or a `StopAutomaton` built from them (share one automaton
    between the choices of a request)."""

    __slots__ = ("_auto", "_held", "_include", "_matched", "_state")

    def __init__(
        self, stops: Sequence[str] | StopAutomaton | None, include_stop: bool = False
    ) -> None:
        if stops is None or isinstance(stops, StopAutomaton):
            self._auto = stops
        else:
            self._auto = compile_stops(stops)
        self._include = include_stop
        self._state = 0
        self._held = ""
        self._matched: str | None = None

    @property
    def stopped(self) -> bool:
        return self._matched is not None

    @property
    def matched(self) -> str | None:
        return self._matched

    def feed(self, text: str) -> tuple[str, bool, str | None]:
        """Returns (text to emit, stopped, the stop string that matched or None)."""
        if self._matched is not None:
            return "", True, self._matched
        auto = self._auto
        if auto is None:
            return text, False, None
        edges, fail, hit, skip = auto.edges, auto.fail, auto.hit, auto.skip
        state = self._state
        i, n = 0, len(text)
        while i < n:
            if not state:
                found = skip(text, i)
                if found is None:
                    break  # nothing in the rest can start a stop string
                i = found.start()
            code = ord(text[i])
            while True:
                nxt = edges.get(state << _SHIFT | code)
                if nxt is not None:
                    state = nxt
                    break
                if not state:
                    break
                state = fail[state]
            i += 1
            stop = hit[state]
            if stop is not None:
                return self._stop(text, i, stop)
        self._state = state
        keep = auto.depth[state]  # the held-back suffix: at most the longest stop string - 1
        held = self._held
        if keep <= n:
            self._held = text[n - keep :] if keep else ""
            return (held + text[: n - keep] if held else text[: n - keep]), False, None
        cut = len(held) - (keep - n)
        self._held = held[cut:] + text
        return held[:cut], False, None

    def _stop(self, text: str, end: int, stop: str) -> tuple[str, bool, str]:
        """`stop` completed at `text[end - 1]`: emit what comes before it (or through it)."""
        pending = self._held + text[:end]
        cut = len(pending) if self._include else len(pending) - len(stop)
        self._matched, self._held, self._state = stop, "", 0
        return pending[:cut], True, stop

    def finish(self) -> str:
        """At the end of the stream without a match: release the held-back text."""
        held, self._held = self._held, ""
        return "" if self._matched is not None else held
