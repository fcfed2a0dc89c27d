"""Numbers from the wire are range-checked and no input makes the codec or the core raise
(finding 3 of issue 10: a Suspect at 2^64-1 made the node refute with 2^64, which did not
encode, and the node was expelled)."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from smg.mesh.codec import CodecError, decode_packet, encode_packet, is_addr
from smg.mesh.config import MeshConfig
from smg.mesh.messages import (
    MAX_INCARNATION,
    Alive,
    Compound,
    Dead,
    Join,
    Leave,
    Message,
    Send,
    StateSync,
    Suspect,
    Update,
)
from smg.mesh.swim import SwimNode

EXTREMES = [0, 1, MAX_INCARNATION - 1, MAX_INCARNATION, MAX_INCARNATION + 1, 2**63 - 1, 2**64 - 1]
SELF, PEER = "self@1", "peer@1"


def _raw(obj: object) -> bytes:
    return b"\x02" + msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize("inc", [MAX_INCARNATION + 1, 2**63, 2**64 - 1])
@pytest.mark.parametrize("tag", [5, 6, 7, 8, 9])
def test_incarnations_past_the_cap_are_malformed(tag: int, inc: int) -> None:
    fields = {
        5: ["n", "127.0.0.1:1", inc],
        6: ["n", inc, "m"],
        7: ["n", inc, "m"],
        8: ["n", inc],
        9: ["n", "127.0.0.1:1", inc],
    }[tag]
    with pytest.raises(CodecError) as err:
        decode_packet(_raw([tag, *fields]), None)
    assert err.value.reason == "malformed"
    # the same inside a gossip batch and a compound
    with pytest.raises(CodecError):
        decode_packet(_raw([10, [[tag, *fields]]]), None)
    with pytest.raises(CodecError):
        decode_packet(_raw([11, [[3, 1], [tag, *fields]]]), None)


def test_the_cap_itself_round_trips() -> None:
    msg = Suspect("n", MAX_INCARNATION, "m")
    assert decode_packet(encode_packet(msg, None), None) == msg


@pytest.mark.parametrize(
    "obj",
    [
        [5, "n", "", 1],
        [5, "n", "h 1:2", 1],
        [5, "n", "h:1\x00", 1],
        [9, "n", "h:" + "9" * 300, 1],
        [2, 1, "t", "\n"],
        [5, "x" * 256, "h:1", 1],
        [1, 1, "é" * 128],  # 256 bytes of UTF-8
    ],
)
def test_bad_addresses_and_long_names_are_malformed(obj: list[object]) -> None:
    with pytest.raises(CodecError) as err:
        decode_packet(_raw(obj), None)
    assert err.value.reason == "malformed"


@pytest.mark.parametrize(
    ("addr", "ok"),
    [("127.0.0.1:39527", True), ("[::1]:1", True), ("n1", True), ("", False), ("a b", False)],
)
def test_is_addr(addr: str, ok: bool) -> None:
    assert is_addr(addr) is ok


# --- the decoder under hypothesis: bytes in, a message or CodecError out --------------------------
_scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from(EXTREMES),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.booleans(),
    st.none(),
)
_trees = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=6), max_leaves=30)


@settings(max_examples=examples(400), deadline=None)
@given(st.integers(min_value=0, max_value=22), st.lists(_trees, max_size=5))
def test_structured_fuzz_decodes_or_raises_codec_error(tag: int, fields: list[object]) -> None:
    data = _raw([tag, *fields])
    try:
        msg = decode_packet(data, None)
    except CodecError:
        return
    assert decode_packet(encode_packet(msg, None), None) == msg  # whatever decodes re-encodes


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    for framed in (data, b"\x02" + data):
        try:
            msg = decode_packet(framed, None)
        except CodecError:
            continue
        encode_packet(msg, None)


# --- the core under extreme values ---------------------------------------------------------------
def _update(kind: int, node: str, inc: int) -> Update:
    match kind:
        case 0:
            return Alive(node, "127.0.0.9:9", inc)
        case 1:
            return Suspect(node, inc, PEER)
        case 2:
            return Dead(node, inc, PEER)
    return Leave(node, inc)


def _all_effects_encode(effects: list[object]) -> None:
    for e in effects:
        if isinstance(e, Send):
            encode_packet(e.message, None)  # raises ValueError if anything is out of range


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),
            st.sampled_from([SELF, PEER, "other@2"]),
            st.one_of(st.sampled_from(EXTREMES), st.integers(-5, 2**64 + 5)),
        ),
        max_size=12,
    )
)
def test_membership_survives_extreme_incarnations(ops: list[tuple[int, str, int]]) -> None:
    node = SwimNode(SELF, "127.0.0.1:1", MeshConfig.test(), random.Random(0))
    now = 0.0
    node.tick(now)
    for kind, who, inc in ops:
        now += 0.05
        msg: Message
        if kind == 4:
            msg = Join(who, "127.0.0.9:9", inc) if who != SELF else Compound(())
        else:
            msg = _update(kind, who, inc)
        node.receive(now, "127.0.0.9:9", msg)
        node.merge(now, (_update(kind % 4, who, inc),))
        _all_effects_encode(node.tick(now))
        assert 0 <= node.incarnation <= MAX_INCARNATION
        for m in node.members().values():
            assert 0 <= m.incarnation <= MAX_INCARNATION
        # what we would push-pull or gossip always encodes
        encode_packet(StateSync(node.table()), None)


def test_the_old_overflow_is_ignored_and_the_cap_is_refuted_without_overflow() -> None:
    node = SwimNode(SELF, "127.0.0.1:1", MeshConfig.test(), random.Random(0))
    node.receive(0.0, "127.0.0.9:9", Suspect(SELF, 2**64 - 1, PEER))
    assert node.incarnation == 0  # out of range: not acted on
    node.receive(0.1, "127.0.0.9:9", Suspect(SELF, MAX_INCARNATION - 1, PEER))
    assert node.incarnation == MAX_INCARNATION  # refuted
    node.receive(0.2, "127.0.0.9:9", Dead(SELF, MAX_INCARNATION, PEER))
    assert node.incarnation == MAX_INCARNATION  # clamped, never past the cap
    _all_effects_encode(node.tick(0.3))
    encode_packet(StateSync(node.table()), None)
