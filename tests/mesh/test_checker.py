from .checker import NodeView, WorkerOp, check, check_rate_bound


def view(node: str, workers: dict, digest: str = "d", totals: dict | None = None) -> NodeView:
    return NodeView(node, digest, workers, totals or {})


def test_clean_history_passes() -> None:
    ops = [WorkerOp("add", "u1", (1, 0, "a"), "a"), WorkerOp("add", "u2", (2, 0, "b"), "b")]
    ops.append(WorkerOp("remove", "u2", (3, 0, "a"), "a"))
    views = [view("a", {"u1": {}}), view("b", {"u1": {}})]
    assert check(views, ops, {("c", 0): 5}) != []  # totals missing
    views = [
        view("a", {"u1": {}}, totals={("c", 0): 5}),
        view("b", {"u1": {}}, totals={("c", 0): 5}),
    ]
    assert check(views, ops, {("c", 0): 5}) == []


def test_each_violation_is_reported() -> None:
    ops = [WorkerOp("add", "u1", (1, 0, "a"), "a"), WorkerOp("remove", "u2", (3, 0, "a"), "a")]
    views = [view("a", {"u2": {}, "ghost": {}}, "x"), view("b", {"u1": {}}, "y")]
    v = check(views, ops)
    assert any("digests differ" in s for s in v)
    assert any("lost u1" in s for s in v)
    assert any("u2 came back" in s for s in v)
    assert any("phantom worker ghost" in s for s in v)


def test_indeterminate_ops_are_not_judged() -> None:
    ops = [WorkerOp("add", "u1", (1, 0, "a"), "a")]
    maybe = [WorkerOp("remove", "u1", (5, 0, "b"), "b")]
    assert check([view("a", {})], ops, maybe=maybe) == []


def test_rate_bound() -> None:
    assert check_rate_bound({("c", 0): 110, ("c", 1): 111}, 100, 1.1) == [
        "caller c window 1: admitted 111 > 1.1 x 100"
    ]
