#!/usr/bin/env python3
"""Paired ours/Rust ratios from the shared harness's raw results (`vs_rust.sh` JSON lines).

For each (mode, concurrency), every rep ran `ours1` and `smg_rr1` back to back, so the ratio of
their gateway CPU-µs per request *within a rep* cancels most of what other load on the box does
to both; this prints the median of those per-rep ratios, next to the medians of the values, and
the same for CPU-µs per streamed chunk ((stream - non-stream µs/req) / 64, per rep). Runs whose
foreign CPU (host busy minus wrk, gateway and worker) exceeds --max-foreign are dropped first.
A second table gives, per mode and concurrency, the p50 each gateway adds over the baseline
(`direct`) in the same rep, the median of the per-rep ratios of those, and peak RSS.

    python bench/pair_ratios.py bench/results/anchor-*.jsonl [--ours ours1] [--ref smg_rr1]
    python bench/pair_ratios.py bench/results/anchor-grpc*.jsonl \
        --ours ours_grpc1 --ref smg_grpc_rr1
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable

STREAM_TOKENS = 64


def load(paths: Iterable[str], max_foreign: float | None) -> list[dict]:
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if "gateway_cpu_us_per_req" in r or r.get("target") == "direct"]
    for r in rows:
        busy = r.get("host_busy_pct", 0.0)
        own = r.get("wrk_cpu_pct", 0) + r.get("gateway_cpu_pct", 0) + r.get("worker_cpu_pct", 0)
        r["foreign_cpu_pct"] = busy - own
    if max_foreign is not None:
        rows = [r for r in rows if r["foreign_cpu_pct"] <= max_foreign]
    return rows


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def table(rows: list[dict], ours: str, ref: str) -> str:
    us: dict[tuple, float] = {}  # (tag, rep, mode, conc, target) -> gateway µs/req
    for r in rows:
        if "gateway_cpu_us_per_req" in r:
            us[(r.get("tag", ""), r["rep"], r["mode"], r["conc"], r["target"])] = r[
                "gateway_cpu_us_per_req"
            ]
    reps = sorted({k[:2] for k in us})
    concs = sorted({k[3] for k in us})
    f = lambda x, p=0: "-" if x != x else f"{x:.{p}f}"  # noqa: E731
    out = [
        f"| conc | {ours} µs/req | {ref} µs/req | ratio (paired) | n | "
        f"{ours} µs/chunk | {ref} µs/chunk | ratio (paired) | n |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in concs:
        req = {t: [us[(*rp, "chat", c, t)] for rp in reps if (*rp, "chat", c, t) in us]
               for t in (ours, ref)}  # fmt: skip
        req_ratio = [us[(*rp, "chat", c, ours)] / us[(*rp, "chat", c, ref)] for rp in reps
                     if (*rp, "chat", c, ours) in us and (*rp, "chat", c, ref) in us]  # fmt: skip
        chunk: dict[str, dict[tuple, float]] = {ours: {}, ref: {}}
        for t in (ours, ref):
            for rp in reps:
                s, n = us.get((*rp, "chat_stream", c, t)), us.get((*rp, "chat", c, t))
                if s is not None and n is not None:
                    chunk[t][rp] = (s - n) / STREAM_TOKENS
        both = [rp for rp in chunk[ours] if rp in chunk[ref] and chunk[ref][rp] > 0]
        chunk_ratio = [chunk[ours][rp] / chunk[ref][rp] for rp in both]
        out.append(
            f"| {c} | {f(_med(req[ours]))} | {f(_med(req[ref]))} | {f(_med(req_ratio), 2)} | "
            f"{len(req_ratio)} | {f(_med(list(chunk[ours].values())), 1)} | "
            f"{f(_med(list(chunk[ref].values())), 1)} | {f(_med(chunk_ratio), 2)} | "
            f"{len(chunk_ratio)} |"
        )
    return "\n".join(out) + "\n"


def latency_rss(rows: list[dict], ours: str, ref: str, baseline: str = "direct") -> str:
    """Per (mode, conc): added p50 (gateway - baseline, same rep) for both gateways, the median of
    the per-rep ratios ours/ref of it and of the differences ours - ref (which needs no baseline:
    in gRPC mode `direct` is the HTTP worker, not the engine), and median peak RSS, with ratio."""
    by: dict[tuple, dict] = {}
    for r in rows:
        by[(r.get("tag", ""), r["rep"], r["mode"], r["conc"], r["target"])] = r
    cells = sorted({(k[2], k[3]) for k in by}, key=lambda mc: (mc[0], mc[1]))
    reps = sorted({k[:2] for k in by})
    f = lambda x, p=2: "-" if x != x else f"{x:.{p}f}"  # noqa: E731
    out = [
        f"| mode | conc | {ours} +p50 ms | {ref} +p50 ms | ratio (paired) | n | "
        f"{ours} - {ref} p50 ms (paired) | {ours} RSS MB | {ref} RSS MB | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, c in cells:
        added: dict[str, dict[tuple, float]] = {ours: {}, ref: {}}
        rss: dict[str, list[float]] = {ours: [], ref: []}
        diff: list[float] = []
        for rp in reps:
            mine, theirs = by.get((*rp, mode, c, ours)), by.get((*rp, mode, c, ref))
            if mine is not None and theirs is not None:
                diff.append(mine["p50_ms"] - theirs["p50_ms"])
            base = by.get((*rp, mode, c, baseline))
            for t in (ours, ref):
                row = by.get((*rp, mode, c, t))
                if row is None:
                    continue
                if "gateway_rss_mb" in row:
                    rss[t].append(row["gateway_rss_mb"])
                if base is not None:
                    added[t][rp] = row["p50_ms"] - base["p50_ms"]
        both = [rp for rp in added[ours] if rp in added[ref] and added[ref][rp] > 0]
        ratio = [added[ours][rp] / added[ref][rp] for rp in both]
        rss_o, rss_r = _med(rss[ours]), _med(rss[ref])
        rss_ratio = rss_o / rss_r if rss_r else float("nan")
        out.append(
            f"| {mode} | {c} | {f(_med(list(added[ours].values())))} | "
            f"{f(_med(list(added[ref].values())))} | {f(_med(ratio))} | {len(ratio)} | "
            f"{f(_med(diff))} | {f(rss_o, 0)} | {f(rss_r, 0)} | {f(rss_ratio)} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ours", default="ours1")
    ap.add_argument("--ref", default="smg_rr1")
    ap.add_argument("--max-foreign", type=float, default=None, help="drop noisier runs (%% CPU)")
    ap.add_argument("--baseline", default="direct", help="target the added p50 is taken over")
    a = ap.parse_args()
    rows = load(a.files, a.max_foreign)
    print(table(rows, a.ours, a.ref))
    print(latency_rss(rows, a.ours, a.ref, a.baseline), end="")


if __name__ == "__main__":
    main()
