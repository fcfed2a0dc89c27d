"""Mesh membership in virtual time: distributions over seeds of the chaos scenarios.

Real SwimNode cores on the seeded simulated network of tests/mesh (LAN profile, no sockets, no
sleeping), so the numbers are exact functions of the seeds and quick to produce:

    .venv/bin/python bench/mesh_sim.py                      # every scenario, default sizes
    .venv/bin/python bench/mesh_sim.py detect --n 3 5 10 20 --seeds 200
    .venv/bin/python bench/mesh_sim.py heal --seeds 1 --first-seed 9   # replay one seed

Scenarios: detect (kill -> DEAD on every survivor, s), loss (10% loss each way for 30 min:
false DEAD episodes), heal (halves for 60 s, then s until all views are all-alive), pause and
pause-drop (SIGSTOP 20 s with packets queued / dropped, then s until ALIVE everywhere again),
restart (new epoch at the same address: s until it replaced the old id everywhere), idle
(steady-state egress per node, B/s).

State scenarios (tests/mesh/statenet.py: each node runs SWIM + replication + worker directory
+ HLC, random worker adds/removes as a checked history): state-heal (halves for 60 s with writes
on both sides: s from the heal until the documents are identical), state-loss, state-crash,
state-flap (s from the last write/fault until identical), state-rl (3 rate limiters at L=100 per
1 s window, 200 req/s each: admitted per window connected, partitioned {n0} | {n1, n2}, healed).
A checker violation is reported as a failure with its seed."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mesh import chaos, statenet

DEFAULT_N = {
    "detect": [3, 5, 10, 20],
    "loss": [5, 10],
    "heal": [10],
    "pause": [5, 10],
    "pause-drop": [5, 10],
    "restart": [5, 10],
    "idle": [10],
    "state-heal": [10],
    "state-loss": [5],
    "state-crash": [5],
    "state-flap": [5],
    "state-rl": [3],
}


def _timed(scenario: str, n: int) -> Callable[[int], float]:
    match scenario:
        case "detect":
            return lambda s: chaos.detect_kill(s, n)
        case "heal":
            return lambda s: chaos.heal_after_partition(s, n, 60.0)
        case "pause":
            return lambda s: chaos.pause_resume(s, n, 20.0, queue=True)
        case "pause-drop":
            return lambda s: chaos.pause_resume(s, n, 20.0, queue=False)
        case "restart":
            return lambda s: chaos.restart_new_epoch(s, n)
        case "state-heal":
            return lambda s: statenet.state_heal(s, n, 60.0)
        case "state-loss":
            return lambda s: statenet.state_loss(s, n)
        case "state-crash":
            return lambda s: statenet.state_crash(s, n)
        case "state-flap":
            return lambda s: statenet.state_flap(s, n)
    raise ValueError(scenario)


def _dist(xs: list[float]) -> str:
    p = chaos.percentile
    return f"p50 {p(xs, 50):6.2f}  p99 {p(xs, 99):6.2f}  max {max(xs):6.2f}"


def run(scenario: str, n: int, seeds: range) -> None:
    t0 = time.perf_counter()
    label = f"{scenario:<10} n={n:<3}"
    failures: list[str] = []
    if scenario == "loss":
        results = []
        for s in seeds:
            try:
                results.append(chaos.false_dead(s, n))
            except chaos.ScenarioError as e:
                failures.append(f"{e}; {chaos.reproduce(scenario, n, s)}")
        dead = sum(r.dead_episodes for r in results)
        lasting = sum(r.lasting_over_2s for r in results)
        suspect = sum(r.suspect_episodes for r in results)
        body = (
            f"false DEAD episodes {dead} (over 2 s: {lasting}), "
            f"SUSPECT episodes {suspect} in {len(results)} x 30 simulated min"
        )
    elif scenario == "idle":
        eg = [chaos.idle_egress(s, n) for s in seeds]
        udp = [e.udp_bps for e in eg]
        tcp = [e.tcp_bps for e in eg]
        body = (
            f"B/s per node: udp {_dist(udp)} | push-pull tcp {_dist(tcp)} | "
            f"busiest node {max(e.max_node_bps for e in eg):.0f}"
        )
    elif scenario == "state-rl":
        rs = [statenet.rate_limit_split(s) for s in seeds]
        lim = rs[0].limit
        body = (
            f"admitted/L per window: connected max {max(max(r.connected) for r in rs) / lim:.2f}"
            f" | partitioned {{n0}} max {max(max(r.alone) for r in rs) / lim:.2f}, "
            f"{{n1, n2}} max {max(max(r.pair) for r in rs) / lim:.2f} | "
            f"healed max {max(max(r.healed) for r in rs) / lim:.2f}"
        )
        for s, r in zip(seeds, rs, strict=True):
            print(f"    seed {s}: {r}", flush=True)
    else:
        fn = _timed(scenario, n)
        xs: list[float] = []
        worst = seeds.start
        for s in seeds:
            try:
                x = fn(s)
            except chaos.ScenarioError as e:
                failures.append(f"{e}; {chaos.reproduce(scenario, n, s)}")
                continue
            if not xs or x > max(xs):
                worst = s
            xs.append(x)
        body = f"seconds: {_dist(xs)}  (worst seed {worst})" if xs else "no result"
    wall = time.perf_counter() - t0
    print(f"{label} {len(seeds):>4} seeds  {body}  [{wall:.1f} s wall]", flush=True)
    for f in failures:
        print(f"    FAILED {f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", default="all", choices=["all", *DEFAULT_N])
    ap.add_argument("--n", type=int, nargs="+", help="cluster sizes (default per scenario)")
    ap.add_argument("--seeds", type=int, default=50, help="seeds per size (default 50)")
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args(argv)
    scenarios = list(DEFAULT_N) if args.scenario == "all" else [args.scenario]
    for scenario in scenarios:
        seeds = args.seeds if scenario not in ("loss", "idle", "state-rl") else min(args.seeds, 5)
        for n in args.n or DEFAULT_N[scenario]:
            run(scenario, n, range(args.first_seed, args.first_seed + seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
