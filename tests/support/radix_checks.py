"""Invariant checks of the radix tree shared by its tests and the cache-index actor's."""

from __future__ import annotations

import sys

from smg.pipeline.radix_tree import NODE_BYTES, TENANT_BYTES, RadixTree


def check_invariants(tree: RadixTree) -> None:
    """Walk the tree and recompute everything it keeps incrementally."""
    sizes: dict[str, int] = {}
    total = 0
    count = 0
    estimated = 0
    root = tree._root
    stack = [root]
    while stack:
        node = stack.pop()
        for first, child in node.children.items():
            assert child.parent is node
            assert len(child.key) > 0
            assert child.key[0] == first
            assert child.tenants, "a node nobody holds must be gone"
            if node is not root:
                assert child.tenants.keys() <= node.tenants.keys(), "tenancy is prefix-closed"
            for tenant in child.tenants:
                sizes[tenant] = sizes.get(tenant, 0) + len(child.key)
            total += len(child.key)
            count += 1
            estimated += NODE_BYTES + TENANT_BYTES * len(child.tenants) + sys.getsizeof(child.key)
            stack.append(child)
    assert tree.tenant_sizes() == sizes
    assert tree.total_size == total
    assert tree.node_count == count
    assert tree.total_bytes == estimated
