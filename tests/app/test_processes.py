"""The `--workers N` parent's view of the user's arguments (smg/app/processes.py)."""

from __future__ import annotations

from smg.app.processes import ProcessGroup
from smg.cli import gateway_config_from, parse
from smg.core.processes import launch_args


def test_in_a_cluster_the_users_peer_flags_reach_the_children_only_normalised() -> None:
    """The user's `--join h1` would mean h1 at each child's own mesh port: a child gets the
    user's peers from `cluster_mesh_args` (with the user's port), not the user's flags."""
    argv = ["node", "--join", "h1", "h2:7000", "--policy", "random", "--history-backend", "none"]
    _, ns = parse(argv)
    cluster = ProcessGroup(gateway_config_from(ns), launch_args(argv), 2, cluster=True)
    assert cluster.user_args == ["--policy", "random", "--history-backend", "none"]
    private = ["--policy", "random", "--history-backend", "none"]
    _, ns = parse(["launch", *private])
    assert ProcessGroup(gateway_config_from(ns), private, 2).user_args == private
