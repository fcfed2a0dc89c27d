"""What a replicated document puts on the wire: updates and state vectors tagged with the
document generation they belong to (see replica.py's generation rule), and the errors a peer's
bytes can raise."""

from __future__ import annotations

from typing import Any

import msgpack

MAX_GENERATION = 2**53 - 1


class ReplicaError(Exception):
    """Bytes from a peer could not be decoded or merged (the peer's fault, not ours)."""

    reason = "malformed"


class RejectedUpdate(ReplicaError):
    """A well-formed update that breaks an ownership or validation rule."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def encode_update(generation: int, payload: bytes) -> bytes:
    """Wrap a pycrdt update or state vector with the generation it belongs to."""
    return msgpack.packb([generation, payload], use_bin_type=True)


def decode_update(data: bytes) -> tuple[int, bytes]:
    """Inverse of `encode_update`; raises ReplicaError on anything else."""
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception as e:
        raise ReplicaError(f"bad envelope: {e}") from e
    if (
        not isinstance(obj, list)
        or len(obj) != 2
        or type(obj[0]) is not int
        or not 0 <= obj[0] <= MAX_GENERATION
        or not isinstance(obj[1], bytes)
    ):
        raise ReplicaError("bad envelope: expected [generation, bytes]")
    return obj[0], obj[1]


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)
