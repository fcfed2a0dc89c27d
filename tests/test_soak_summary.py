"""bench/soak_summary.py: the soak's verdict over the harness's raw lines (pure, no run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import soak_summary  # noqa: E402


def row(target: str, rep: int, rss: float | None = 60.0, non2xx: int = 0, errors: int = 0) -> dict:
    r = {"target": target, "rep": rep, "requests": 1000, "non2xx": non2xx, "errors": errors}
    if rss is not None:
        r["gateway_rss_mb"] = rss
    return r


def test_clean_soak_passes_and_reports_growth(tmp_path: Path) -> None:
    rows = [row("direct", 0, None), row("direct", 1, None)]
    rows += [row("ours1", 0, 60.0), row("ours1", 0, 62.0), row("ours1", 1, 64.0)]
    path = tmp_path / "soak.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "soak.md"
    assert soak_summary.main([str(path), "--out", str(out)]) == 0
    t = soak_summary.tally(rows)["ours1"]
    assert (t.requests, t.rss_first, t.rss_last, t.rss_peak) == (3000, 62.0, 64.0, 64.0)
    assert round(t.rss_growth_pct or 0, 2) == 3.23
    assert "VERDICT: PASS" in out.read_text() and "| direct | 2 |" in out.read_text()


def test_errors_growth_or_one_rep_fail() -> None:
    def passed(rows: list[dict]) -> bool:
        return soak_summary.verdict(soak_summary.tally(rows), 10.0)[0]

    assert passed([row("ours1", 0), row("ours1", 1, 65.9)])
    assert not passed([row("ours1", 0), row("ours1", 1, 66.0)])  # +10 %: the limit
    assert not passed([row("ours1", 0), row("ours1", 1, non2xx=1)])
    assert not passed([row("ours_grpc1", 0), row("ours_grpc1", 1, errors=2)])
    assert not passed([row("ours1", 0), {"target": "ours1", "rep": 1, "error": "wrk died"}])
    assert not passed([row("ours1", 0)])  # one rep: no growth to judge
    assert not passed([row("direct", 0), row("direct", 1)])  # none of ours ran
    assert passed([row("ours1", 0), row("ours1", 1), row("smg_rr1", 1, non2xx=5)])  # theirs
