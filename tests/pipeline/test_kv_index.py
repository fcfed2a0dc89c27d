"""The KV-block index: events in, per-worker cached runs out; sequence gaps, restarts, bounds."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from smg_grpc_proto.generated import common_pb2 as pb

from smg.pipeline.kv_index import KvIndex, KvIndexes, Verdict
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.policies.cache_aware import CacheAwarePolicy

BS = 4
TOKENS = list(range(100, 124))  # six blocks of four


def blocks(start: int, n: int, tokens: list[int] = TOKENS) -> list[tuple[int, list[int]]]:
    """Engine blocks `start .. start+n` of `tokens`, hashed like an engine would (any ints)."""
    return [(7000 + start + i, tokens[(start + i) * BS : (start + i + 1) * BS]) for i in range(n)]


def stored(
    bl: list[tuple[int, list[int]]], parent: int | None = None, **kw: object
) -> pb.KvCacheEvent:
    ev = pb.KvBlocksStored(
        blocks=[pb.KvBlock(block_hash=h, token_ids=t, block_size=BS) for h, t in bl], **kw
    )
    if parent is not None:
        ev.parent_block_hash = parent
    return pb.KvCacheEvent(stored=ev)


def removed(*hashes: int) -> pb.KvCacheEvent:
    return pb.KvCacheEvent(removed=pb.KvBlocksRemoved(block_hashes=list(hashes)))


def cleared() -> pb.KvCacheEvent:
    return pb.KvCacheEvent(cleared=pb.KvCacheCleared())


def batch(seq: int, *events: pb.KvCacheEvent) -> pb.KvEventBatch:
    return pb.KvEventBatch(sequence_number=seq, events=list(events))


def live(index: KvIndex, wid: str, *batches: pb.KvEventBatch) -> list[Verdict]:
    index.open_stream(wid)
    return [index.apply_batch(wid, b) for b in batches]


def test_stored_with_parent_chaining_and_match_runs() -> None:
    idx = KvIndex()
    assert (
        live(idx, "a", batch(1, stored(blocks(0, 2))), batch(2, stored(blocks(2, 2), 7001)))
        == [Verdict.APPLIED] * 2
    )
    live(idx, "b", batch(1, stored(blocks(0, 1))))
    assert idx.block_size == BS  # learned from the first event
    assert idx.match(["a", "b", "c"], TOKENS) == {"a": 4, "b": 1}  # c: never subscribed
    assert idx.match(["a", "b"], TOKENS[:7]) == {"a": 1, "b": 1}  # only full blocks count
    other = [1, *TOKENS[1:]]  # the first block differs: nothing after it can match
    assert idx.match(["a", "b"], other) == {"a": 0, "b": 0}
    assert idx.sizes() == {"a": 4, "b": 1} and idx.distinct_blocks == 4


def test_same_block_content_at_another_position_does_not_match() -> None:
    idx = KvIndex()
    rep = [1, 2, 3, 4] * 3
    live(idx, "a", batch(1, stored(blocks(0, 1, rep))))  # [1,2,3,4] at position 0
    assert idx.match(["a"], rep) == {"a": 1}
    assert idx.match(["a"], [9, 9, 9, 9, *rep]) == {"a": 0}  # same content, position 1


def test_unknown_parent_is_dropped_not_misplaced() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(1, 2), parent=12345)))
    assert idx.size("a") == 0 and idx.dropped_total == 2


def test_removed_leaves_a_hole_and_cleared_empties() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(0, 4))), batch(2, removed(7001)))
    assert idx.match(["a"], TOKENS) == {"a": 1}  # the run stops at the removed block
    assert idx.size("a") == 3
    idx.apply_batch("a", batch(3, removed(424242)))  # unknown hash: ignored
    idx.apply_batch("a", batch(4, cleared()))
    assert idx.match(["a"], TOKENS) == {"a": 0} and idx.size("a") == 0
    assert idx.authoritative("a") and idx.distinct_blocks == 0


def test_two_workers_share_content_and_removal_is_per_worker() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(0, 2))))
    live(idx, "b", batch(1, stored(blocks(0, 2))))
    idx.apply_batch("a", batch(2, removed(7000)))
    assert idx.match(["a", "b"], TOKENS) == {"a": 0, "b": 2}
    assert idx.distinct_blocks == 2


def test_gap_mid_stream_drops_the_worker_until_a_new_stream_rebuilds_it() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(0, 1))))
    assert idx.apply_batch("a", batch(3, stored(blocks(1, 1), 7000))) is Verdict.GAP
    assert not idx.authoritative("a") and idx.match(["a"], TOKENS) == {}
    assert idx.size("a") == 0  # dropped, not trusted
    # the new stream replays the engine's history from 1
    replay = [batch(1, stored(blocks(0, 1))), batch(2, stored(blocks(1, 1), 7000))]
    assert live(idx, "a", *replay, batch(3, stored(blocks(2, 1), 7001))) == [Verdict.APPLIED] * 3
    assert idx.authoritative("a") and idx.match(["a"], TOKENS) == {"a": 3}
    assert idx.status("a")["complete"] is True


def test_stale_stream_drops_entries_and_a_truncated_replay_is_incomplete() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(0, 2))))
    idx.mark_stale("a")
    assert not idx.authoritative("a") and idx.size("a") == 0
    # the engine's history starts at 9: blocks whose parent came earlier cannot be placed
    assert (
        live(idx, "a", batch(9, stored(blocks(2, 1), 7001)), batch(10, stored(blocks(0, 1))))
        == [Verdict.APPLIED] * 2
    )
    assert idx.match(["a"], TOKENS) == {"a": 1} and idx.status("a")["complete"] is False
    assert idx.dropped_total == 1 and idx.status("a")["last_seq"] == 10


def test_restart_mid_stream_numbering_from_one_resets() -> None:
    idx = KvIndex()
    chain = [batch(s, stored(blocks(s - 1, 1), 6998 + s if s > 1 else None)) for s in (1, 2, 3)]
    live(idx, "a", *chain)
    assert idx.match(["a"], TOKENS) == {"a": 3}
    # behind a relay the stream survives the engine's restart: its numbering starts over
    assert idx.apply_batch("a", batch(1, stored(blocks(0, 1)))) is Verdict.RESET
    assert idx.match(["a"], TOKENS) == {"a": 1} and idx.status("a")["last_seq"] == 1
    # a new stream is always a rebuild, whatever its numbering
    live(idx, "a", batch(2, stored(blocks(0, 1))))
    assert idx.match(["a"], TOKENS) == {"a": 1} and idx.size("a") == 1


def test_duplicates_and_load_only_batches_do_not_move_the_cursor() -> None:
    idx = KvIndex()
    hello = pb.KvEventBatch(sequence_number=0, load=pb.EngineLoad(load_only=True))
    assert live(idx, "a", hello) == [Verdict.APPLIED]
    assert not idx.authoritative("a")  # a heartbeat proves nothing about the cache
    idx.apply_batch("a", batch(1, stored(blocks(0, 1))))
    assert idx.apply_batch("a", batch(1, stored(blocks(0, 1)))) is Verdict.DUPLICATE
    beat = pb.KvEventBatch(sequence_number=1, load=pb.EngineLoad(load_only=True))
    assert idx.apply_batch("a", beat) is Verdict.APPLIED
    assert idx.status("a")["last_seq"] == 1 and idx.size("a") == 1


def test_snapshot_chunks_resync_then_authoritative() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(3, 1))))  # stale entry the snapshot must drop
    idx.open_stream("a")

    def chunk(seq: int, i: int, *events: pb.KvCacheEvent) -> pb.KvEventBatch:
        snap = pb.KvSnapshotChunk(index=i, count=2, blocks=2)
        return pb.KvEventBatch(sequence_number=seq, events=list(events), snapshot=snap)

    assert idx.apply_batch("a", chunk(40, 0, cleared(), stored(blocks(0, 1)))) is Verdict.RESET
    assert not idx.authoritative("a")
    idx.apply_batch("a", chunk(41, 1, stored(blocks(1, 1), 7000)))
    assert idx.authoritative("a") and idx.status("a")["complete"]
    assert idx.match(["a"], TOKENS) == {"a": 2} and idx.size("a") == 2


def test_block_size_mismatch_marks_worker_incompatible() -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(0, 1))))
    odd = pb.KvCacheEvent(
        stored=pb.KvBlocksStored(
            blocks=[pb.KvBlock(block_hash=1, token_ids=TOKENS[:8], block_size=8)]
        )
    )
    live(idx, "b", batch(1, odd))
    assert idx.match(["a", "b"], TOKENS) == {"a": 1}
    assert not idx.authoritative("b")


def test_lora_and_remote_blocks_are_not_indexed() -> None:
    idx = KvIndex()
    live(
        idx,
        "a",
        batch(1, stored(blocks(0, 1), lora_name="sql")),
        batch(2, stored(blocks(0, 1), locality=pb.KV_CACHE_LOCALITY_REMOTE)),
    )
    assert idx.size("a") == 0


def test_memory_cap_evicts_oldest_and_under_reports() -> None:
    idx = KvIndex(max_blocks_per_worker=3)
    live(idx, "a", batch(1, stored(blocks(0, 5))))
    assert idx.size("a") == 3 and idx.evicted_total == 2
    assert idx.match(["a"], TOKENS) == {"a": 0}  # the first blocks went first: no run from 0
    assert idx.total_blocks == 3


def test_forget_drops_everything() -> None:
    idxs = KvIndexes()
    live(idxs.for_model("m"), "a", batch(1, stored(blocks(0, 2))))
    idxs.forget("a")
    assert idxs.sizes() == {"m": {}}
    index = idxs.get("m")
    assert index is not None and index.distinct_blocks == 0


def test_kv_index_is_pure() -> None:
    path = Path(__file__).resolve().parents[2] / "smg" / "pipeline" / "kv_index.py"
    mods = {
        (n.module or "").split(".")[0]
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.ImportFrom)
    } | {
        a.name.split(".")[0]
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Import)
        for a in n.names
    }
    assert not mods & {"asyncio", "socket", "time", "grpc", "threading", "random"}


# ---------------------------------------------------------------- routing on the index


@dataclass(frozen=True)
class W:
    worker_id: str
    load: int = 0

    @property
    def url(self) -> str:
        return f"grpc://{self.worker_id}"


def policy(idxs: KvIndexes | None) -> CacheAwarePolicy:
    clock = iter(range(1, 10_000))
    return CacheAwarePolicy(
        cache_threshold=0.3,
        balance_abs_threshold=64,
        balance_rel_threshold=1.5,
        now=lambda: float(next(clock)),
        kv_index=idxs,
    )


def test_policy_prefers_the_worker_holding_the_most_kv_blocks() -> None:
    idxs = KvIndexes()
    idx = idxs.for_model("m")
    live(idx, "a", batch(1, stored(blocks(0, 1))))
    live(idx, "b", batch(1, stored(blocks(0, 4))))
    p = policy(idxs)
    req = RouteRequest(tokens=TOKENS, model="m")
    assert p.select([W("a"), W("b", load=3)], req) == 1  # 16/24 cached beats 4/24
    # imbalance still wins over the cache
    assert p.select([W("a"), W("b", load=200)], req) == 0


def test_policy_falls_back_to_the_tree_for_non_authoritative_workers() -> None:
    idxs = KvIndexes()
    idx = idxs.for_model("m")
    live(idx, "b", batch(1, stored(blocks(0, 1))))
    p = policy(idxs)
    req = RouteRequest(tokens=TOKENS, model="m")
    p.state.tree("m").insert(TOKENS, "a", 0.0)  # the tree thinks a holds everything
    assert p.select([W("a", load=1), W("b")], req) == 0  # a: no stream, tree share 1.0
    idx.mark_stale("b")  # b's stream failed: its (now unused) KV entries do not count
    live(idx, "a", batch(1, cleared()))  # a is now authoritative with an empty cache
    p.state.tree("m").insert(TOKENS, "b", 1.0)
    assert p.select([W("a"), W("b", load=1)], req) == 1  # b falls back to its tree share


def test_policy_without_tokens_or_index_keeps_the_tree_rules() -> None:
    p = policy(None)
    assert p.select([W("a"), W("b")], RouteRequest(text="hello", model="m")) == 0
    p2 = policy(KvIndexes())  # no index for the model yet
    assert p2.select([W("a"), W("b")], RouteRequest(tokens=TOKENS, model="m")) == 0


@pytest.mark.parametrize("n", [1, 3])
def test_match_is_order_independent(n: int) -> None:
    idx = KvIndex()
    live(idx, "a", batch(1, stored(blocks(0, n))))
    assert idx.match(["a"], TOKENS) == idx.match(("a",), TOKENS) == {"a": n}
