"""How replicated documents move between nodes: a sans-IO core over the replicas.

Three paths, all as `Stream` effects (TCP) the driver performs:

- deltas: local writes, collected at each `tick`, pushed to every live member;
- contact: when a member becomes live in our view (join, refute, healed partition) we send it our
  state vectors with `reply=True`; it answers with what we miss and its own vectors, so both
  sides repair at once;
- anti-entropy: every `sync_interval_s` one random live member gets our state vectors (repairs
  whatever a lost delta left behind).

Bad bytes from a peer, and updates that break an ownership or validation rule, are counted by
(namespace, reason) in `rejected` and dropped, never raised.
"""

from __future__ import annotations

import random
from collections import Counter

from smg.mesh.messages import DocUpdate, DocVector, Stream, StreamMessage
from smg.mesh.replica import Replica, ReplicaError


class Replication:
    def __init__(
        self, replicas: dict[str, Replica], rng: random.Random, sync_interval_s: float
    ) -> None:
        self.replicas = replicas
        self.rng = rng
        self.sync_interval_s = sync_interval_s
        self.live: frozenset[str] = frozenset()
        self.rejected: Counter[tuple[str, str]] = Counter()  # (namespace, reason)
        self._next_sync_s: float | None = None

    def tick(self, now: float, live: frozenset[str]) -> list[Stream]:
        """Call every driver tick with the addresses of the live members (self excluded)."""
        out = self.set_live(live)
        for name, replica in self.replicas.items():
            delta = replica.take_delta()
            if delta is not None:
                out += [Stream(addr, DocUpdate(name, delta)) for addr in sorted(self.live)]
        if self._next_sync_s is None:
            self._next_sync_s = now + self.rng.uniform(0, self.sync_interval_s)
        if now >= self._next_sync_s:
            self._next_sync_s = now + self.sync_interval_s
            if self.live:
                out += self.vectors(self.rng.choice(sorted(self.live)))
        return out

    def set_live(self, live: frozenset[str]) -> list[Stream]:
        """New live members get our vectors at once (contact repair)."""
        fresh = live - self.live
        self.live = live
        return [s for addr in sorted(fresh) for s in self.vectors(addr)]

    def vectors(self, addr: str) -> list[Stream]:
        return [
            Stream(addr, DocVector(name, replica.state_vector(), True))
            for name, replica in self.replicas.items()
        ]

    def receive(self, src: str, msg: StreamMessage) -> tuple[list[Stream], set[str]]:
        """A DocVector or DocUpdate from `src`: the answers to send, and the namespaces whose
        visible content changed."""
        changed: set[str] = set()
        out: list[Stream] = []
        match msg:
            case DocVector(namespace, vector, reply):
                replica = self.replicas.get(namespace)
                if replica is None:
                    return out, changed
                try:
                    missing = replica.diff(vector)
                except ReplicaError as e:
                    self.rejected[namespace, e.reason] += 1
                    return out, changed
                if missing is None:  # the peer is in a newer generation: ask for its state
                    out.append(Stream(src, DocVector(namespace, replica.state_vector(), False)))
                    return out, changed
                out.append(Stream(src, DocUpdate(namespace, missing)))
                if reply:
                    out.append(Stream(src, DocVector(namespace, replica.state_vector(), False)))
            case DocUpdate(namespace, update):
                replica = self.replicas.get(namespace)
                if replica is None:
                    return out, changed
                try:
                    if replica.apply(update):
                        changed.add(namespace)
                except ReplicaError as e:
                    self.rejected[namespace, e.reason] += 1
        return out, changed
