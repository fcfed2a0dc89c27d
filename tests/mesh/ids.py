"""Test identities: a node's signing key pair from a seed, so simulations stay reproducible."""

from __future__ import annotations

import random

from smg.mesh.identity import NodeIdentity
from smg.mesh.ownership import Validator
from smg.mesh.replica import Replica


def identity(name: str, seed: int = 0) -> NodeIdentity:
    """`name` ("a@1") plus the fingerprint of a key pair drawn from `seed`."""
    return NodeIdentity.generate(name, random.Random(f"{name}/{seed}"))


def replica(name: str, seed: int = 0, ns: str = "ns", validate: Validator | None = None) -> Replica:
    return Replica(ns, identity(name, seed), validate)
