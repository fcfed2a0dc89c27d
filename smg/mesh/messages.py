"""SWIM wire messages and the effects the sans-IO node asks its driver to perform."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Incarnations only grow by refutation, one step per accusation: no honest cluster gets near 2^62.
# The codec rejects larger values and the core ignores them, so refuting (incarnation + 1) can never
# produce a number the wire cannot carry.
MAX_INCARNATION = 2**62 - 1
MAX_NAME_BYTES = 255  # node ids, addresses and namespace names on the wire (UTF-8 bytes)
# What the codec wraps around a packet's msgpack payload at most: the version byte, then the
# nonce and tag of the encryption (codec.py checks this against keyring.SEAL_OVERHEAD).
PACKET_ENVELOPE_BYTES = 1 + 12 + 16


class State(StrEnum):
    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class Member:
    node_id: str
    addr: str
    state: State
    incarnation: int
    since_s: float


# --- probes ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ping:
    seq: int
    target: str  # node id the sender means to reach; a mismatch is ignored


@dataclass(frozen=True, slots=True)
class PingReq:
    seq: int
    target: str
    target_addr: str


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int


@dataclass(frozen=True, slots=True)
class Nack:
    """Lifeguard: a helper could not reach the target (proves the helper path works)."""

    seq: int


# --- membership updates (gossiped) -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Alive:
    node: str
    addr: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class Suspect:
    node: str
    incarnation: int
    from_node: str


@dataclass(frozen=True, slots=True)
class Dead:
    node: str
    incarnation: int
    from_node: str


@dataclass(frozen=True, slots=True)
class Leave:
    node: str
    incarnation: int


Update = Alive | Suspect | Dead | Leave


# --- join / state sync ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Join:
    node: str
    addr: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class StateSync:
    updates: tuple[Update, ...]


MAX_COMPOUND_PARTS = 64  # parts of one Compound (it never nests); the codec enforces it


@dataclass(frozen=True, slots=True)
class Compound:
    parts: tuple[Message, ...]


Message = Ping | PingReq | Ack | Nack | Alive | Suspect | Dead | Leave | Join | StateSync | Compound


# --- stream (TCP) messages: anti-entropy and replicated state ---------------------------------
@dataclass(frozen=True, slots=True)
class PushPull:
    """Full membership exchange over TCP. The receiver merges `updates` and, when `reply`,
    answers with its own table (reply=False) to the sender's address `addr`."""

    node: str
    addr: str
    updates: tuple[Update, ...]
    reply: bool


@dataclass(frozen=True, slots=True)
class DocVector:
    """What the sender holds of one replicated namespace (a pycrdt state vector); the receiver
    answers with a DocUpdate of what the sender misses and, when `reply`, its own DocVector."""

    namespace: str
    state_vector: bytes
    reply: bool


@dataclass(frozen=True, slots=True)
class DocUpdate:
    """A pycrdt update (a delta, or a diff against a state vector) for one namespace."""

    namespace: str
    update: bytes


StreamMessage = PushPull | DocVector | DocUpdate


# --- effects ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Send:
    """Send one UDP packet."""

    addr: str
    message: Message


@dataclass(frozen=True, slots=True)
class Stream:
    """Send one message over the TCP stream to `addr` (same host:port as the UDP address)."""

    addr: str
    message: StreamMessage


Effect = Send | Stream


def _str(text: str) -> int:
    return len(text.encode()) + 2  # msgpack: up to a 2-byte header under 256 bytes


_INT = 9  # the widest msgpack integer


def approx_size(msg: Message) -> int:
    """An upper bound of the encoded payload size (without PACKET_ENVELOPE_BYTES): cheap, for
    packet budgets."""
    match msg:
        case Compound(parts):
            return 4 + sum(approx_size(p) for p in parts)
        case StateSync(updates):
            return 4 + sum(approx_size(u) for u in updates)
        case Alive(node, addr, _) | Join(node, addr, _):
            return 3 + _INT + _str(node) + _str(addr)
        case Suspect(node, _, frm) | Dead(node, _, frm):
            return 3 + _INT + _str(node) + _str(frm)
        case Leave(node, _) | Ping(_, node):
            return 3 + _INT + _str(node)
        case PingReq(_, target, addr):
            return 3 + _INT + _str(target) + _str(addr)
        case _:
            return 3 + _INT
