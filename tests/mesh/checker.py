"""A Jepsen-style checker over a recorded mesh history: pure functions, violations as strings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Stamp = tuple[int, int, str]


@dataclass(frozen=True, slots=True)
class WorkerOp:
    """An acknowledged add/remove of a worker, with the HLC stamp it was published under."""

    kind: str  # "add" | "remove"
    url: str
    ts: Stamp
    node: str


@dataclass(frozen=True, slots=True)
class NodeView:
    """What one live node shows at the end of the run."""

    node: str
    digest: str
    workers: Mapping[str, Any]  # url -> spec (WorkerDirectory.effective())
    # (caller, window) -> summed count over all nodes as this node saw it at the window's end
    rate_totals: Mapping[tuple[str, int], int] = field(default_factory=dict)


def check_digests(views: Sequence[NodeView]) -> list[str]:
    digests = {v.digest for v in views}
    if len(digests) <= 1:
        return []
    return ["digests differ: " + ", ".join(f"{v.node}={v.digest[:12]}" for v in views)]


def check_workers(
    views: Sequence[NodeView], ops: Sequence[WorkerOp], maybe: Sequence[WorkerOp] = ()
) -> list[str]:
    """Every url whose latest acknowledged op is an add is present everywhere; one whose latest is
    a remove is absent everywhere; nothing never added appears. Urls with an indeterminate
    (`maybe`) op later than their latest acknowledged one are not judged."""
    latest: dict[str, WorkerOp] = {}
    for op in ops:
        cur = latest.get(op.url)
        if cur is None or (op.ts, op.kind == "remove") > (cur.ts, cur.kind == "remove"):
            latest[op.url] = op
    unsure = {m.url for m in maybe if m.url not in latest or m.ts > latest[m.url].ts}
    out: list[str] = []
    for url, op in sorted(latest.items()):
        if url in unsure:
            continue
        for v in views:
            if op.kind == "add" and url not in v.workers:
                out.append(f"{v.node}: lost {url} (added at {op.ts} on {op.node})")
            if op.kind == "remove" and url in v.workers:
                out.append(f"{v.node}: {url} came back (removed at {op.ts} on {op.node})")
    for v in views:
        for url in sorted(set(v.workers) - set(latest) - unsure):
            out.append(f"{v.node}: phantom worker {url}")
    return out


def check_rate_totals(views: Sequence[NodeView], acked: Mapping[tuple[str, int], int]) -> list[str]:
    """Each view's summed per-window counters equal the acknowledged increments."""
    out: list[str] = []
    for v in views:
        for key in sorted(set(acked) | set(v.rate_totals)):
            got, want = v.rate_totals.get(key, 0), acked.get(key, 0)
            if got != want:
                out.append(f"{v.node}: caller {key[0]} window {key[1]}: {got} != acked {want}")
    return out


def check_rate_bound(acked: Mapping[tuple[str, int], int], limit: int, slack: float) -> list[str]:
    return [
        f"caller {c} window {w}: admitted {n} > {slack} x {limit}"
        for (c, w), n in sorted(acked.items())
        if n > slack * limit
    ]


def check(
    views: Sequence[NodeView],
    ops: Sequence[WorkerOp],
    acked_increments: Mapping[tuple[str, int], int] | None = None,
    maybe: Sequence[WorkerOp] = (),
) -> list[str]:
    out = check_digests(views) + check_workers(views, ops, maybe)
    if acked_increments is not None:
        out += check_rate_totals(views, acked_increments)
    return out
