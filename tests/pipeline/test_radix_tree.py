"""The radix tree: table tests, LRU eviction with a fake clock, properties against brute force."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.radix_checks import check_invariants

from smg.pipeline.radix_eviction import Eviction, evict
from smg.pipeline.radix_tree import PrefixMatch, RadixTree

AnyKey: TypeAlias = str | tuple[int, ...]

# ---- helpers -----------------------------------------------------------------------------------


def lcp(a: Sequence[object], b: Sequence[object]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def brute_match(inserted: Sequence[tuple[AnyKey, str]], query: AnyKey) -> PrefixMatch:
    best = max((lcp(query, k) for k, _ in inserted), default=0)
    if best == 0:
        return PrefixMatch(0, ())
    return PrefixMatch(best, tuple(sorted({t for k, t in inserted if lcp(query, k) >= best})))


def sorted_match(m: PrefixMatch) -> PrefixMatch:
    return PrefixMatch(m.matched, tuple(sorted(m.tenants)))


def prefixes(keys: Sequence[AnyKey]) -> set[AnyKey]:
    return {k[:i] for k in keys for i in range(1, len(k) + 1)}


# ---- table tests -------------------------------------------------------------------------------


def test_empty_tree_matches_nothing() -> None:
    tree = RadixTree()
    assert tree.match("hello") == PrefixMatch(0, ())
    assert tree.match("") == PrefixMatch(0, ())
    assert tree.match_tenant("hello", "a") == 0
    assert (tree.total_size, tree.node_count, tree.tenant_sizes()) == (0, 0, {})


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("hello world", PrefixMatch(11, ("a",))),
        ("hello there", PrefixMatch(6, ("a",))),
        ("help", PrefixMatch(3, ("a",))),
        ("hello world, and more", PrefixMatch(11, ("a",))),
        ("xyz", PrefixMatch(0, ())),
        ("", PrefixMatch(0, ())),
    ],
)
def test_match_on_text(query: str, expected: PrefixMatch) -> None:
    tree = RadixTree()
    tree.insert("hello world", "a", 1.0)
    assert tree.match(query) == expected


def test_split_and_shared_prefix_across_tenants() -> None:
    tree = RadixTree()
    tree.insert("abcdef", "a", 1.0)
    tree.insert("abcxyz", "b", 2.0)
    # "abc" is split off and shared; "def" and "xyz" hang below it.
    assert tree.node_count == 3
    assert tree.total_size == 9
    assert tree.tenant_sizes() == {"a": 6, "b": 6}
    assert sorted_match(tree.match("abc")) == PrefixMatch(3, ("a", "b"))
    assert sorted_match(tree.match("ab")) == PrefixMatch(2, ("a", "b"))
    assert tree.match("abcd") == PrefixMatch(4, ("a",))
    assert tree.match("abcxy!") == PrefixMatch(5, ("b",))
    assert tree.match_tenant("abcdef", "b") == 3
    assert tree.match_tenant("abcdef", "a") == 6
    assert tree.match_tenant("abcdef", "nobody") == 0
    check_invariants(tree)


def test_insert_prefix_of_existing_key_splits_without_new_leaf() -> None:
    tree = RadixTree()
    tree.insert("abcdef", "a", 1.0)
    tree.insert("abc", "b", 2.0)
    assert tree.node_count == 2
    assert tree.tenant_sizes() == {"a": 6, "b": 3}
    assert sorted_match(tree.match("abcdef")) == PrefixMatch(6, ("a",))
    assert sorted_match(tree.match("abc")) == PrefixMatch(3, ("a", "b"))
    check_invariants(tree)


def test_reinserting_is_idempotent_for_sizes() -> None:
    tree = RadixTree()
    for now in (1.0, 2.0, 3.0):
        tree.insert("same key", "a", now)
    assert tree.tenant_sizes() == {"a": 8}
    assert tree.node_count == 1


@pytest.mark.parametrize("as_type", [tuple, list])
def test_match_on_token_ids(as_type: type) -> None:
    tree = RadixTree()
    tree.insert(as_type([1, 2, 3, 4]), "a", 1.0)
    tree.insert(as_type([1, 2, 500_000]), "b", 2.0)
    assert tree.match(as_type([1, 2, 3, 9])) == PrefixMatch(3, ("a",))
    assert sorted_match(tree.match(as_type([1, 2]))) == PrefixMatch(2, ("a", "b"))
    assert tree.match(as_type([1, 2, 500_000, 7])) == PrefixMatch(3, ("b",))
    assert tree.match(as_type([7])) == PrefixMatch(0, ())
    assert tree.tenant_sizes() == {"a": 4, "b": 3}
    check_invariants(tree)


def test_text_and_token_keys_do_not_match_each_other() -> None:
    tree = RadixTree()
    tree.insert("ab", "a", 1.0)
    tree.insert([97, 98], "b", 1.0)
    assert tree.match("ab") == PrefixMatch(2, ("a",))
    assert tree.match((97, 98)) == PrefixMatch(2, ("b",))


def test_tree_does_not_alias_a_callers_token_list() -> None:
    tree = RadixTree()
    tokens = [5, 6, 7]
    tree.insert(tokens, "a", 1.0)
    tokens[0] = 99
    assert tree.match([5, 6, 7]).matched == 3


def test_match_among_restricts_to_given_tenants() -> None:
    tree = RadixTree()
    tree.insert("abcdef", "a", 1.0)
    tree.insert("abcxyz", "b", 1.0)
    assert tree.match("abcdef", among={"b"}) == PrefixMatch(3, ("b",))
    assert tree.match("abcdef", among={"a", "b"}) == PrefixMatch(6, ("a",))
    assert tree.match("abcdef", among=set()) == PrefixMatch(0, ())


# ---- eviction ----------------------------------------------------------------------------------


def test_evict_removes_least_recently_used_first() -> None:
    tree = RadixTree()
    tree.insert("aaaa", "t", 1.0)
    tree.insert("bbbb", "t", 2.0)
    tree.insert("cccc", "t", 3.0)
    tree.insert("aaaa", "t", 4.0)  # refresh: now "bbbb" is the oldest
    assert evict(tree, 8) == 4
    assert tree.match("bbbb") == PrefixMatch(0, ())
    assert tree.match("aaaa").matched == 4
    assert tree.match("cccc").matched == 4
    assert tree.tenant_size("t") == 8
    check_invariants(tree)


def test_match_does_not_refresh_access_time() -> None:
    tree = RadixTree()
    tree.insert("old", "t", 1.0)
    tree.insert("new", "t", 2.0)
    for _ in range(3):
        assert tree.match("old").matched == 3
    evict(tree, 3)
    assert tree.match("old").matched == 0
    assert tree.match("new").matched == 3


def test_evict_is_per_tenant() -> None:
    tree = RadixTree()
    tree.insert("shared-a", "big", 1.0)
    tree.insert("shared-b", "big", 2.0)
    tree.insert("shared-a", "small", 0.5)
    freed = evict(tree, 8)
    assert freed == 1  # "big" drops its oldest leaf "a"; "small" is within the bound
    assert tree.tenant_sizes() == {"big": 8, "small": 8}
    assert sorted_match(tree.match("shared-a")) == PrefixMatch(8, ("small",))
    assert tree.match("shared-b") == PrefixMatch(8, ("big",))
    check_invariants(tree)


def test_evict_walks_up_and_merges_leftovers() -> None:
    tree = RadixTree()
    tree.insert("prefix-1", "t", 1.0)
    tree.insert("prefix-2", "t", 2.0)
    assert tree.node_count == 3
    assert evict(tree, 8) == 1
    assert tree.node_count == 1, "'prefix-' and '2' are merged once '1' is gone"
    assert tree.match("prefix-2") == PrefixMatch(8, ("t",))
    # With a bound below the last key, the leaf and then its parents go, newest last.
    assert evict(tree, 0) == 8
    assert (tree.node_count, tree.total_size, tree.tenant_sizes()) == (0, 0, {})


def test_evict_keeps_a_recently_used_short_prefix() -> None:
    # "b" was used last; its stale extensions go, and the leftovers are not merged into one node
    # (that would make "b" share the fate of the older "bb").
    tree = RadixTree()
    tree.insert("ba", "t", 0.0)
    tree.insert("bb", "t", 1.0)
    tree.insert("b", "t", 2.0)
    assert evict(tree, 1) == 2
    assert tree.match("b") == PrefixMatch(1, ("t",))
    assert tree.match("bb").matched == 1
    check_invariants(tree)


def test_evict_under_bound_is_a_no_op() -> None:
    tree = RadixTree()
    tree.insert("abc", "t", 1.0)
    assert evict(tree, 3) == 0
    assert tree.tenant_size("t") == 3


# ---- remove_tenant -----------------------------------------------------------------------------


def test_remove_tenant_cleans_nodes_and_merges() -> None:
    tree = RadixTree()
    tree.insert("abcdef", "a", 1.0)
    tree.insert("abcxyz", "b", 2.0)
    tree.remove_tenant("a")
    assert tree.node_count == 1
    assert tree.total_size == 6
    assert tree.tenant_sizes() == {"b": 6}
    assert tree.match("abcdef") == PrefixMatch(3, ("b",))
    tree.remove_tenant("b")
    assert (tree.node_count, tree.total_size) == (0, 0)
    tree.remove_tenant("never-seen")
    check_invariants(tree)


# ---- properties against brute force ------------------------------------------------------------

text_keys = st.text(alphabet="abc", max_size=8)
token_keys = st.lists(st.integers(0, 3), max_size=8).map(tuple)
tenants = st.sampled_from(["w0", "w1", "w2"])


@settings(max_examples=examples(100), deadline=None)
@given(
    st.one_of(
        st.tuples(st.lists(st.tuples(text_keys, tenants), max_size=25), st.lists(text_keys)),
        st.tuples(st.lists(st.tuples(token_keys, tenants), max_size=25), st.lists(token_keys)),
    )
)
def test_match_equals_brute_force(
    case: tuple[list[tuple[AnyKey, str]], list[AnyKey]],
) -> None:
    inserted, queries = case
    tree = RadixTree()
    for i, (key, tenant) in enumerate(inserted):
        tree.insert(key, tenant, float(i))
    check_invariants(tree)
    for query in [k for k, _ in inserted] + queries:
        assert sorted_match(tree.match(query)) == brute_match(inserted, query)
        for tenant in ("w0", "w1", "w2"):
            own = [(k, t) for k, t in inserted if t == tenant]
            assert tree.match_tenant(query, tenant) == brute_match(own, query).matched
    # sizes: the distinct prefixes each tenant (and anyone) inserted
    for tenant in ("w0", "w1", "w2"):
        own_keys = [k for k, t in inserted if t == tenant]
        assert tree.tenant_size(tenant) == len(prefixes(own_keys))
    assert tree.total_size == len(prefixes([k for k, _ in inserted]))


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(text_keys, tenants), max_size=30), st.integers(0, 12))
def test_evict_bounds_sizes_and_keeps_newest_key(
    inserted: list[tuple[str, str]], bound: int
) -> None:
    tree = RadixTree()
    for i, (key, tenant) in enumerate(inserted):
        tree.insert(key, tenant, float(i))
    before = {t: tree.tenant_size(t) for t in ("w0", "w1", "w2")}
    freed = evict(tree, bound)
    check_invariants(tree)
    after = {t: tree.tenant_size(t) for t in ("w0", "w1", "w2")}
    assert freed == sum(before.values()) - sum(after.values())
    for tenant in ("w0", "w1", "w2"):
        assert after[tenant] <= bound
        own = [k for k, t in inserted if t == tenant]
        if own and len(own[-1]) <= bound:
            assert tree.match_tenant(own[-1], tenant) == len(own[-1]), "LRU keeps the newest"
        # Strict LRU over prefixes: nothing evicted was used after anything that survived.
        last: dict[str, int] = {}
        for i, (key, t) in enumerate(inserted):
            if t == tenant:
                last.update((key[:j], i) for j in range(1, len(key) + 1))
        kept = {p for p in last if tree.match_tenant(p, tenant) == len(p)}
        gone = last.keys() - kept
        assert len(kept) == after[tenant]
        if kept and gone:
            assert max(last[p] for p in gone) <= min(last[p] for p in kept)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("insert"), text_keys, tenants),
            st.tuples(st.just("evict"), st.integers(0, 10), st.just("")),
            st.tuples(st.just("remove"), st.just(""), tenants),
        ),
        max_size=40,
    )
)
def test_random_operations_keep_invariants(ops: list[tuple[str, object, str]]) -> None:
    tree = RadixTree()
    for i, (op, arg, tenant) in enumerate(ops):
        if op == "insert":
            assert isinstance(arg, str)
            tree.insert(arg, tenant, float(i))
        elif op == "evict":
            assert isinstance(arg, int)
            evict(tree, arg)
            assert all(size <= arg for size in tree.tenant_sizes().values())
        else:
            tree.remove_tenant(tenant)
            assert tree.tenant_size(tenant) == 0
        check_invariants(tree)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(text_keys, tenants), max_size=25), tenants)
def test_remove_tenant_equals_never_inserting_it(
    inserted: list[tuple[str, str]], gone: str
) -> None:
    tree = RadixTree()
    for i, (key, tenant) in enumerate(inserted):
        tree.insert(key, tenant, float(i))
    tree.remove_tenant(gone)
    check_invariants(tree)
    rest = [(k, t) for k, t in inserted if t != gone]
    for key, _ in inserted:
        assert sorted_match(tree.match(key)) == brute_match(rest, key)


# ---- incremental eviction (Eviction.step) ------------------------------------------------------


def snapshot(tree: RadixTree, queries: Sequence[AnyKey]) -> tuple[object, ...]:
    return (
        tree.tenant_sizes(),
        tree.total_size,
        tree.node_count,
        tuple(sorted_match(tree.match(q)) for q in queries),
    )


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.tuples(text_keys, tenants), max_size=30),
    st.integers(0, 12),
    st.sampled_from([1, 2, 3, 7]),
)
def test_evict_in_steps_equals_evict_at_once(
    inserted: list[tuple[str, str]], bound: int, budget: int
) -> None:
    whole, sliced = RadixTree(), RadixTree()
    for i, (key, tenant) in enumerate(inserted):
        whole.insert(key, tenant, float(i))
        sliced.insert(key, tenant, float(i))
    freed = evict(whole, bound)
    job = Eviction(sliced, bound)
    steps = 0
    while not job.step(budget):
        steps += 1
        check_invariants(sliced)  # consistent between steps
        assert steps < 10_000
    assert job.done and job.freed == freed
    queries = [k for k, _ in inserted]
    assert snapshot(sliced, queries) == snapshot(whole, queries)


def test_a_step_does_bounded_work() -> None:
    tree = RadixTree()
    for i in range(50):
        tree.insert(f"{i:03d}-key", "t", float(i))
    nodes, total = tree.node_count, tree.total_size
    job = Eviction(tree, 0)
    steps = 1
    while not job.step(1):
        steps += 1
    assert steps >= nodes, "one unit per step: at least a step per scanned node"
    assert tree.node_count == 0 and job.freed == total


def test_nothing_over_the_bound_is_done_at_once() -> None:
    tree = RadixTree()
    tree.insert("abc", "t", 1.0)
    job = Eviction(tree, 3)
    assert job.done and job.step(1) and job.freed == 0


def test_a_prefix_refreshed_between_steps_is_not_evicted() -> None:
    tree = RadixTree()
    tree.insert("aaaa", "t", 1.0)
    tree.insert("bbbb", "t", 2.0)
    tree.insert("cccc", "t", 3.0)
    job = Eviction(tree, 8)
    assert not job.step(3)  # the scan has queued "aaaa" as the oldest leaf
    tree.insert("aaaa", "t", 4.0)  # a request refreshes it mid-pass
    while not job.step(1):
        pass
    assert tree.match("aaaa").matched == 4
    assert tree.match("bbbb").matched == 0, "the next oldest went instead"
    assert tree.tenant_size("t") == 8
    check_invariants(tree)


def test_a_leaf_extended_between_steps_is_no_leaf_any_more() -> None:
    tree = RadixTree()
    tree.insert("ab", "t", 1.0)
    tree.insert("xy", "t", 2.0)
    job = Eviction(tree, 2)
    assert not job.step(2)  # both leaves queued
    tree.insert("abcd", "t", 1.0)  # same stamp, but "ab" now has a child held by "t"
    while not job.step(1):
        pass
    check_invariants(tree)
    # "ab" was skipped (dropping it under a held "cd" would break prefix-closure); the pass ends
    # over the bound, and the unseen "cd" waits for the next pass.
    assert tree.match("xy").matched == 0
    assert tree.match("abcd") == PrefixMatch(4, ("t",))
    assert tree.tenant_size("t") == 4
    assert evict(tree, 2) == 2 and tree.match("abcd").matched == 2


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(text_keys, tenants), max_size=25),
    st.integers(0, 10),
    st.lists(
        st.one_of(
            st.tuples(st.just("insert"), text_keys, tenants),
            st.tuples(st.just("match"), text_keys, tenants),
            st.tuples(st.just("remove"), st.just(""), tenants),
        ),
        max_size=30,
    ),
)
def test_requests_between_steps_keep_the_tree_consistent(
    inserted: list[tuple[str, str]],
    bound: int,
    between: list[tuple[str, str, str]],
) -> None:
    tree = RadixTree()
    t = 0.0
    for key, tenant in inserted:
        t += 1
        tree.insert(key, tenant, t)
    job = Eviction(tree, bound)
    ops = iter(between)
    while not job.step(1):
        op = next(ops, None)
        if op is None:
            continue
        kind, key, tenant = op
        t += 1
        if kind == "insert":
            tree.insert(key, tenant, t)
        elif kind == "match":
            m = tree.match(key)
            assert m.matched <= len(key)
        else:
            tree.remove_tenant(tenant)
        check_invariants(tree)
    check_invariants(tree)
    evict(tree, bound)  # whatever the moving tree hid from the pass, the next one finishes
    assert all(size <= bound for size in tree.tenant_sizes().values())
    check_invariants(tree)
