#!/usr/bin/env python3
"""Verdict of a soak (`bench/soak.sh`): the shared harness's raw JSON lines in, a summary out.

Per target: runs, total requests, non-2xx, socket errors (connect/read/write/timeout), failed
runs (wrk or the target could not run). For our gateways (`ours*`): RSS at the first and the
last rep (the largest per-run peak within each rep), the peak of the whole soak, and the growth
first -> last in %. The verdict fails (exit 1) when one of ours has any non-2xx, socket error or
failed run, grows its RSS by `--max-rss-growth-pct` (10) or more, or ran in fewer than two reps
(no growth to judge).

    python bench/soak_summary.py bench/results/soak-*.jsonl [--out summary.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Tally:
    runs: int = 0
    failed_runs: int = 0
    requests: int = 0
    non2xx: int = 0
    socket_errors: int = 0
    rss_by_rep: dict[int, float] = field(default_factory=dict)  # rep -> largest per-run peak

    @property
    def rss_first(self) -> float | None:
        return self.rss_by_rep[min(self.rss_by_rep)] if self.rss_by_rep else None

    @property
    def rss_last(self) -> float | None:
        return self.rss_by_rep[max(self.rss_by_rep)] if self.rss_by_rep else None

    @property
    def rss_peak(self) -> float | None:
        return max(self.rss_by_rep.values()) if self.rss_by_rep else None

    @property
    def rss_growth_pct(self) -> float | None:
        first, last = self.rss_first, self.rss_last
        if first is None or last is None or first <= 0 or len(self.rss_by_rep) < 2:
            return None
        return 100.0 * (last - first) / first


def tally(rows: Iterable[dict]) -> dict[str, Tally]:
    out: dict[str, Tally] = {}
    for r in rows:
        t = out.setdefault(r["target"], Tally())
        t.runs += 1
        if "error" in r or "requests" not in r:
            t.failed_runs += 1
            continue
        t.requests += int(r["requests"])
        t.non2xx += int(r["non2xx"])
        t.socket_errors += int(r["errors"])
        rss = r.get("gateway_rss_mb")
        if rss is not None and "rep" in r:
            rep = int(r["rep"])
            t.rss_by_rep[rep] = max(t.rss_by_rep.get(rep, 0.0), float(rss))
    return out


def verdict(tallies: dict[str, Tally], max_growth_pct: float) -> tuple[bool, list[str]]:
    """(passed, reasons it failed) over our targets (`ours*`)."""
    ours = {name: t for name, t in tallies.items() if name.startswith("ours")}
    problems = [] if ours else ["no run of ours (ours1 / ours_grpc1) in the results"]
    for name, t in sorted(ours.items()):
        if t.non2xx or t.socket_errors or t.failed_runs:
            problems.append(
                f"{name}: {t.non2xx} non-2xx, {t.socket_errors} socket errors,"
                f" {t.failed_runs} failed runs"
            )
        growth = t.rss_growth_pct
        if growth is None:
            problems.append(f"{name}: RSS growth unknown (fewer than two reps measured)")
        elif growth >= max_growth_pct:
            problems.append(f"{name}: RSS grew {growth:.1f} % (limit {max_growth_pct:g} %)")
    return not problems, problems


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def render(tallies: dict[str, Tally], max_growth_pct: float) -> tuple[bool, str]:
    lines = [
        "| target | runs | reps | requests | non-2xx | socket errors | failed runs"
        " | RSS first MB | RSS last MB | RSS peak MB | RSS growth % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in sorted(tallies.items()):
        growth = t.rss_growth_pct
        lines.append(
            f"| {name} | {t.runs} | {len(t.rss_by_rep) or '-'} | {t.requests} | {t.non2xx}"
            f" | {t.socket_errors} | {t.failed_runs} | {_mb(t.rss_first)} | {_mb(t.rss_last)}"
            f" | {_mb(t.rss_peak)} | {'-' if growth is None else f'{growth:+.1f}'} |"
        )
    passed, problems = verdict(tallies, max_growth_pct)
    if passed:
        lines.append(
            f"\nVERDICT: PASS (ours: zero non-2xx, zero socket errors,"
            f" RSS growth < {max_growth_pct:g} %)"
        )
    else:
        lines.append("\nVERDICT: FAIL: " + "; ".join(problems))
    return passed, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--max-rss-growth-pct", type=float, default=10.0)
    ap.add_argument("--out", help="also write the summary here")
    a = ap.parse_args(argv)
    rows = []
    for path in a.files:
        with open(path) as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    passed, text = render(tally(rows), a.max_rss_growth_pct)
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
