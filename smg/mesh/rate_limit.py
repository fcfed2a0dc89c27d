"""Cluster-wide rate limiting over a Replica: fixed windows, per caller, pure.

Each node counts what it admitted per caller in the current window ``w = floor(now / window_s)``
and ``flush(now)`` (coalesced: see FLUSH_EVERY) publishes ONE key per node (subkey ``"rl"``) holding
``[w, {caller: admitted}, {caller: demand in w-1} | None]``. One key per node rather than one per
caller per node: overwriting a single key leaves one squashed tombstone range (bounded, ~35 B
measured), whereas interleaved overwrites of many keys cost ~key length + 6 B each, forever, until
compaction. Readers count another node's value only if its window index is the current window
(the previous-window demand is a forecast only).

Admission for ``caller`` on this node (``mine`` = what this node admitted this window):

* ``mine < limit / live_nodes`` (the fair share) is always admitted;
* beyond it, borrow only while ``mine + 1 + reserved <= limit``. ``reserved`` water-fills the limit
  (max-min fair) over the other nodes' forecast demand, 1.1 x what each was asked for (admitted +
  refused) last window, with this node taking the rest, and counts each node at
  ``max(seen this window, its fill)``. A live node whose last-window demand we have not seen
  (no fresh value, or it just booted), or one already past its forecast this window (its load
  jumped), is forecast a fair share.

Borrowing also ramps up: a node may borrow nothing at the moment it reaches its fair share and
all of the others' shares half a window later. Peers' counts arrive a tick late, so nodes that wake
together (after an idle window) would otherwise each lend themselves the same slack at once.

So all nodes see (nearly) the same allocation summing to ``limit``: equal load gets fair shares,
skewed load gives the heavy node what the light ones do not ask for, and a lone loaded node whose
peers report idle windows uses the whole limit. Overshoot comes from a node whose demand jumps
above its forecast; it is bounded by its fair share, and by one window of lag.

Peers' values are validated before they are merged (`valid_value`: window index, caller names,
counts in range, at most `MAX_CALLERS` callers); a malformed counter is dropped and counted and
never reaches `try_acquire`. A node publishes at most `MAX_CALLERS` callers (its busiest).

Partitions: ``live_nodes`` is what this side's membership sees and nodes across the cut stop
reporting (their values age out of the current window), so each side admits up to ``limit`` per
window on its own: a k-way partition admits up to k x limit cluster-wide. This is a deliberate
availability choice; a stricter bound would need a quorum.
"""

from __future__ import annotations

import math
from typing import Any

from smg.mesh.replica import Replica, owner_of

SUBKEY = "rl"
MAX_CALLERS = 4096  # callers per published value (the busiest, when a window has more)
MAX_CALLER_CHARS = 512
MAX_COUNT = 2**31
FORECAST_MARGIN = 1.1
RAMP_FRACTION = 0.5  # borrowing opens up over half a window from reaching the fair share
# Publishing is coalesced: every change goes to every peer, so a value per tick (20/s under
# load) was the mesh's largest cost as the cluster grew (docs/scale.md). A count is published at
# once when the window rolls or a caller's count moved by FLUSH_STEP of its fair share since the
# last value, else at most FLUSH_EVERY of a window late.
FLUSH_EVERY = 0.25
FLUSH_STEP = 0.05


class ClusterRateLimiter:
    def __init__(self, replica: Replica, node_id: str, limit: int, window_s: float) -> None:
        if limit <= 0 or window_s <= 0:
            raise ValueError("limit and window_s must be positive")
        if replica.owner != node_id:
            raise ValueError("the limiter publishes through its own node's replica")
        self.replica = replica
        self.node_id = node_id
        self.limit = limit
        self.window_s = window_s
        self._window: int | None = None
        self._boot_window: int | None = None  # partial: never used as a forecast
        self._counts: dict[str, int] = {}
        self._full_at: dict[str, float] = {}  # when this window's count reached the fair share
        self._demand: dict[str, int] = {}  # admitted + refused, this window
        self._prev: dict[str, int] | None = None  # None: we were not up for the whole last one
        self._peers: tuple[int, dict[str, tuple[int, dict[str, int], dict[str, int] | None]]]
        self._peers = (-1, {})
        self._live_nodes = 1  # as the last try_acquire saw it: sizes the fair share
        self._flushed: tuple[int, float, dict[str, int]] | None = None  # window, when, counts

    def window_of(self, now: float) -> int:
        return math.floor(now / self.window_s)

    def _roll(self, now: float) -> int:
        w = self.window_of(now)
        if self._window is None:
            self._window = self._boot_window = w
        elif w != self._window:
            if self._window == self._boot_window:
                self._prev = None
            else:
                self._prev = dict(self._demand) if w == self._window + 1 else {}
            self._counts = {}
            self._full_at = {}
            self._demand = {}
            self._window = w
        return w

    def _others(self) -> dict[str, tuple[int, dict[str, int], dict[str, int] | None]]:
        version, cached = self._peers
        if version == self.replica.version:
            return cached
        out: dict[str, tuple[int, dict[str, int], dict[str, int] | None]] = {}
        for key, value in self.replica.items().items():
            owner = owner_of(key)
            if owner == self.node_id or key != f"{owner}/{SUBKEY}":
                continue
            parsed = _parse(value)
            if parsed is not None:
                out[owner] = parsed
        self._peers = (self.replica.version, out)
        return out

    def _reserved(self, caller: str, w: int, live_nodes: int, fair: float) -> float:
        seen: list[int] = []
        demands: list[float] = []
        for win, counts, prev in self._others().values():
            if win == w:
                s, d = counts.get(caller, 0), (None if prev is None else prev.get(caller, 0))
            elif win == w - 1:
                s, d = 0, None  # its last-window demand is not in this value: assume a share
            else:
                continue  # stale: a dead node or one across a partition
            if d is not None and s > FORECAST_MARGIN * d:
                d = None  # already past its forecast (e.g. idle -> loaded): assume a share
            seen.append(s)
            demands.append(fair if d is None else FORECAST_MARGIN * d)
        demands += [fair] * max(0, live_nodes - 1 - len(seen))
        seen += [0] * (len(demands) - len(seen))
        level = water_level(demands, self.limit)
        return sum(max(s, min(d, level)) for s, d in zip(seen, demands, strict=True))

    def try_acquire(self, caller: str, now: float, live_nodes: int) -> bool:
        w = self._roll(now)
        mine = self._counts.get(caller, 0)
        fair = self.limit / max(1, live_nodes)
        self._live_nodes = live_nodes
        self._demand[caller] = self._demand.get(caller, 0) + 1
        if mine + 1 <= fair:
            self._counts[caller] = mine + 1
            return True
        full_at = self._full_at.setdefault(caller, now)
        if (
            mine + 1 <= fair + self._ramp(now - full_at) * (self.limit - fair)
            and mine + 1 + self._reserved(caller, w, live_nodes, fair) <= self.limit
        ):
            self._counts[caller] = mine + 1
            return True
        return False

    def _ramp(self, borrowing_for_s: float) -> float:
        """How much of the others' shares may be borrowed yet: nothing when this node reaches
        its fair share, all of it RAMP_FRACTION of a window later. Peers' counts arrive a tick
        late; without the ramp every node waking from an idle window lent itself the others'
        shares at once (3 real nodes, 10/s: 14-17 admitted in the first loaded window)."""
        return min(1.0, borrowing_for_s / (RAMP_FRACTION * self.window_s))

    def retry_after_s(self, caller: str, now: float) -> float:
        """Seconds until the next window opens (when every caller's count starts over)."""
        w = self._roll(now)
        return max(0.0, (w + 1) * self.window_s - now)

    def flush(self, now: float) -> None:
        """Publish this node's counters for the current window (idle nodes publish too: peers
        read an empty window as 'idle', a missing one as 'unknown, reserve a fair share')."""
        w = self._roll(now)
        counts = _busiest(self._counts)
        if not self._due(w, now, counts):
            return
        self._flushed = (w, now, counts)
        prev = None if self._prev is None else _busiest(self._prev)
        self.replica.put(SUBKEY, [w, counts, prev])

    def _due(self, w: int, now: float, counts: dict[str, int]) -> bool:
        if self._flushed is None:
            return True
        window, at, published = self._flushed
        if window != w or now - at >= FLUSH_EVERY * self.window_s:
            return True
        step = max(1.0, FLUSH_STEP * self.limit / max(1, self._live_nodes))
        return any(n - published.get(c, 0) >= step for c, n in counts.items())

    def totals(self, now: float) -> dict[str, int]:
        """Per caller: this node's count plus every other node's last-seen count, this window."""
        w = self._roll(now)
        out = dict(self._counts)
        for win, counts, _prev in self._others().values():
            if win == w:
                for caller, n in counts.items():
                    out[caller] = out.get(caller, 0) + n
        return out


def water_level(demands: list[float], limit: float) -> float:
    """Max-min fair share left for one more node of unbounded demand next to `demands`."""
    remaining, n = float(limit), len(demands) + 1
    for i, d in enumerate(sorted(demands)):
        share = remaining / (n - i)
        if d >= share:
            return share
        remaining -= d
    return remaining


def _busiest(counts: dict[str, int]) -> dict[str, int]:
    if len(counts) <= MAX_CALLERS:
        return dict(counts)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:MAX_CALLERS])


def _counts_ok(value: Any) -> bool:
    return (
        type(value) is dict
        and len(value) <= MAX_CALLERS
        and all(
            type(k) is str and len(k) <= MAX_CALLER_CHARS and type(n) is int and 0 <= n <= MAX_COUNT
            for k, n in value.items()
        )
    )


def valid_value(subkey: str, value: Any) -> bool:
    """May a peer's value for `subkey` enter the rate-limit document? (schema, types, ranges)"""
    return subkey == SUBKEY and _parse(value) is not None


def _parse(value: Any) -> tuple[int, dict[str, int], dict[str, int] | None] | None:
    if type(value) is not list or len(value) != 3:
        return None
    w, counts, prev = value
    if type(w) is not int or not 0 <= w < 2**53:
        return None
    if not _counts_ok(counts) or not (prev is None or _counts_ok(prev)):
        return None
    return w, counts, prev
