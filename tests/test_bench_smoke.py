"""The benchmarks in bench/: the pure summaries (profile stacks, the overhead table), then one
short real run of bench/overhead.py (sim worker + gateway + aiohttp client on loopback)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import flame  # noqa: E402
import overhead  # noqa: E402
import stacks  # noqa: E402

pytestmark = pytest.mark.serial  # runs the benches, which time and size what they measure

SITE = "/x/lib/python3.11/site-packages"
RAW = f"""\
<module> (smg/__main__.py:5);run (asyncio/runners.py:118);data_received ({SITE}/aiohttp/web_protocol.py:400) 60
<module> (smg/__main__.py:5);run (asyncio/runners.py:118);_middleware (/r/smg/api/middleware.py:120);request_done (/r/smg/metrics.py:110) 25
<module> (smg/__main__.py:5);run (asyncio/runners.py:118);_middleware (/r/smg/api/middleware.py:121) 10
<module> (smg/__main__.py:5);f (a.py:1);f (a.py:2);f (a.py:3) 5
garbage line without a count
"""  # noqa: E501


def test_stacks_parse_and_group() -> None:
    s = stacks.summarise(stacks.parse(RAW.splitlines()))
    assert s.total == 100
    mw = stacks.Frame("_middleware", "/r/smg/api/middleware.py")
    assert s.own[mw] == 10  # lines of one function merge
    assert s.cumulative[mw] == 35
    assert s.cumulative[stacks.Frame("f", "a.py")] == 5  # recursion counts once
    assert s.groups["aiohttp server"] == 60
    assert s.groups["metrics"] == 25
    assert s.groups["our middleware"] == 10
    assert s.groups_cumulative["our middleware"] == 35
    assert stacks.short_path(f"{SITE}/aiohttp/web_protocol.py") == "aiohttp/web_protocol.py"
    text = stacks.render(s, top=3)
    assert "| 60.0 | `data_received (aiohttp/web_protocol.py)` | aiohttp server |" in text


def test_flame_graph_merges_lines_and_scales_boxes() -> None:
    root = flame.tree(RAW.splitlines())
    assert root["n"] == 100  # the garbage line is skipped
    top = root["kids"]["<module> (smg/__main__.py)"]
    mw = top["kids"]["run (asyncio/runners.py)"]["kids"]["_middleware (/r/smg/api/middleware.py)"]
    assert mw["n"] == 35  # its two lines merge; the metrics call below it is its child
    assert mw["kids"]["request_done (/r/smg/metrics.py)"]["n"] == 25
    drawn = flame.svg(root, "t")
    assert drawn.count("<rect") == 8  # one box per distinct frame path (f, f, f: three deep)
    assert f'width="{flame.WIDTH * 35 / 100:.1f}"' in drawn
    assert "_middleware (/r/smg/api/middleware.py): 35 samples, 35.0 %" in drawn


def _row(target: str, mode: str, conc: int, rep: int, p50: float, us: float | None) -> dict:
    row = {"target": target, "mode": mode, "conc": conc, "rep": rep, "rps": 1000.0,
           "p50_ms": p50, "p99_ms": 2 * p50, "worker_cpu_pct": 50.0, "foreign_cpu_pct": 0.0,
           "errors": 0}  # fmt: skip
    if us is not None:
        row |= {"gw_us_per_req": us, "gw_cpu_pct": 40.0, "gw_rss_mb": 50.0}
    return row


def test_overhead_summary_pairs_reps_and_prices_chunks() -> None:
    rows = [
        _row("direct", "chat", 1, 0, 0.20, None),
        _row("ours", "chat", 1, 0, 0.50, 300.0),
        _row("direct", "chat_stream", 1, 0, 0.30, None),
        _row("ours", "chat_stream", 1, 0, 0.90, 300.0 + 64 * 5),
    ]
    text = overhead.summary(rows, "meta")
    assert "| 1 | 300 | 620 | 5.0 | 0.30 | 0.60 |" in text
    assert "Gateway peak RSS: 50 MB" in text


@pytest.mark.integration  # runs bench/overhead.py (worker + gateway processes)
def test_overhead_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    cmd = [sys.executable, str(BENCH / "overhead.py"), "--conc", "2", "--duration", "1",
           "--warmup", "0", "--client", "aiohttp", "--results", str(tmp_path), "--out", str(out),
           "--max-total-s", "60"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["target"], r["mode"]) for r in rows} == {
        (t, m) for t in ("ours", "direct") for m in ("chat", "chat_stream")
    }
    assert all(r["requests"] > 0 and r["errors"] == 0 for r in rows)
    assert all(r["gw_us_per_req"] > 0 for r in rows if r["target"] == "ours")
    assert "µs/chunk" in out.with_suffix(".md").read_text()


def test_pair_ratios_pairs_within_a_rep() -> None:
    import pair_ratios

    def r(target: str, mode: str, rep: int, us: float) -> dict:
        return {"target": target, "mode": mode, "conc": 1, "rep": rep, "tag": "",
                "gateway_cpu_us_per_req": us}  # fmt: skip

    rows = [
        r("ours1", "chat", 0, 600),
        r("smg_rr1", "chat", 0, 400),
        r("ours1", "chat_stream", 0, 600 + 64 * 10),  # 10 µs per chunk
        r("smg_rr1", "chat_stream", 0, 400 + 64 * 20),
        r("ours1", "chat", 1, 900),  # rep 1 has no streams: no chunk pair
        r("smg_rr1", "chat", 1, 600),
    ]
    text = pair_ratios.table(rows, "ours1", "smg_rr1")
    assert "| 1 | 750 | 500 | 1.50 | 2 | 10.0 | 20.0 | 0.50 | 1 |" in text


def test_pair_ratios_added_p50_and_rss() -> None:
    import pair_ratios

    def r(target: str, rep: int, p50: float, rss: float | None = None) -> dict:
        row = {"target": target, "mode": "chat", "conc": 1, "rep": rep, "tag": "", "p50_ms": p50}
        return row | ({"gateway_rss_mb": rss} if rss is not None else {})

    rows = [
        r("direct", 0, 0.2), r("ours_grpc1", 0, 1.2, 60), r("smg_grpc_rr1", 0, 0.7, 80),
        r("direct", 1, 0.3), r("ours_grpc1", 1, 1.5, 64), r("smg_grpc_rr1", 1, 0.9, 80),
    ]  # fmt: skip
    text = pair_ratios.latency_rss(rows, "ours_grpc1", "smg_grpc_rr1")
    # +p50 ours 1.0/1.2 -> 1.10, Rust 0.5/0.6 -> 0.55; ratios 2.0, 2.0; diffs 0.5, 0.6 -> 0.55
    assert "| chat | 1 | 1.10 | 0.55 | 2.00 | 2 | 0.55 | 62 | 80 | 0.78 |" in text


def test_stacks_groups_grpc_mode_frames() -> None:
    def g(func: str, path: str) -> str:
        return stacks.group_of(stacks.Frame(func, path))

    assert g("decode_sync", "/r/smg/pipeline/tokenizer.py").startswith("HF tokenizers")
    assert g("encode", "/r/smg/pipeline/tokenizer.py").startswith("template + tokenize")
    assert g("on_event", "/r/smg/pipeline/output.py") == "our output shaper + detokenizer"
    assert g("feed", "/r/smg/pipeline/detokenize.py") == "our output shaper + detokenizer"
    assert g("events", "/r/smg/pipeline/backends/grpc.py").startswith("our gRPC adapter")
    assert g("_fetch", f"{SITE}/grpc/aio/_call.py").startswith("grpc.aio")
    assert g("x", f"{SITE}/google/protobuf/message.py").startswith("protobuf")
    assert g("write", f"{SITE}/aiohttp/http_writer.py").startswith("aiohttp writes")
    assert g("_stream", "/r/smg/flow/tokens.py").startswith("our handler")
    assert g("select", "/r/smg/pipeline/policies/round_robin.py").startswith("routing")


def test_stacks_main_thread_and_idle_filters() -> None:
    raw = """\
_run_module_as_main (<frozen runpy>:198);Runner.run (asyncio/runners.py:118);epoll_wait (libc.so.6) 40
_run_module_as_main (<frozen runpy>:198);Runner.run (asyncio/runners.py:118);write (libc.so.6) 30
Thread._bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:81);PyThread_acquire_lock_timed (libpython3.11.so.1.0);0x7f26ee6a3f16 (libc.so.6) 20
Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);0x7f26ecd50b27 (grpc/_cython/cygrpc.so) 10
"""  # noqa: E501
    samples = stacks.parse(raw.splitlines())
    assert sum(n for _, n in stacks.filter_samples(samples, main_only=True, drop_idle=False)) == 70
    assert sum(n for _, n in stacks.filter_samples(samples, main_only=False, drop_idle=True)) == 40
    kept = stacks.filter_samples(samples, main_only=True, drop_idle=True)
    assert [n for _, n in kept] == [30]


def test_policy_ab_workload_is_seeded_and_mixed() -> None:
    import policy_ab

    a = policy_ab.workload(400, 10.0, 20, 30, 0.7, 0.8, seed=3)
    assert a == policy_ab.workload(400, 10.0, 20, 30, 0.7, 0.8, seed=3)
    assert all(x.at_s < y.at_s for x, y in itertools.pairwise(a))  # Poisson: increasing
    shared = [r for r in a if r.prefix_id >= 0]
    assert 0.6 < len(shared) / len(a) < 0.8
    assert len({r.system for r in a if r.prefix_id < 0}) == len(a) - len(shared)  # all unique
    assert len({r.user for r in a}) == len(a)
    counts = [sum(r.prefix_id == k for r in shared) for k in range(20)]
    assert counts[0] > counts[-1]  # Zipf-ish: the first prefix is the most popular
    assert 0.4 < policy_ab.repeat_share(a) < 0.7  # 20 prefixes: nearly every shared one repeats


def test_policy_ab_summary_and_goals() -> None:
    import policy_ab

    def o(ttft: float, cached: int) -> policy_ab.Outcome:
        return policy_ab.Outcome(True, ttft, ttft + 0.5, 1000, cached, 0.0, 10.0)

    rr = policy_ab.summarise("round_robin", [o(0.2, 100)] * 9 + [o(0.9, 0)], [3, 3, 2, 2])
    ca = policy_ab.summarise("cache_aware", [o(0.05, 600)] * 9 + [o(0.3, 0)], [3, 2, 3, 2])
    assert round(rr["hit_rate"], 3) == 0.09 and round(ca["hit_rate"], 3) == 0.54
    assert rr["ttft_p50_ms"] == 200.0 and rr["ttft_p99_ms"] == 900.0
    assert rr["max_mean_load"] == 1.2 and rr["throughput_rps"] == 1.0
    text = "\n".join(policy_ab.goals([rr, ca]))
    assert text.count(": met") == 3
    assert ca["cached_tokens"] == 5400
    assert "| cache_aware | 10/0 | 54.0% | 5,400 | 50 | 300 |" in policy_ab.table([ca])
    # a variant row: its own label, the policy it runs and the flag that makes it a variant
    assert policy_ab.resolve("cache_aware_tree_only") == ("cache_aware", ("--disable-kv-events",))
    assert policy_ab.resolve("round_robin") == ("round_robin", ())
    assert policy_ab.available(["cache_aware_tree_only", "no_such"]) == (
        ["cache_aware_tree_only"],
        ["no_such"],
    )


@pytest.mark.integration  # runs bench scripts as processes
def test_policy_ab_and_radix_bench_run(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    cmd = [sys.executable, str(BENCH / "policy_ab.py"), "--policies", "round_robin,no_such",
           "--engines", "2", "--requests", "6", "--rate", "4", "--prefixes", "3",
           "--prefix-words", "40", "--max-tokens", "4", "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "not available in this checkout (skipped): no_such" in p.stdout
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] == 6 and sum(row["engine_requests"]) == 6 and row["ttft_p50_ms"] > 0
    cmd = [sys.executable, str(BENCH / "radix_bench.py"), "--n", "200", "--reps", "1",
           "--out", str(tmp_path / "radix.json")]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((tmp_path / "radix.json").read_text())["rows"]
    assert [r["n"] for r in rows] == [200, 200] and all(r["bytes_per_node"] > 0 for r in rows)


def test_storage_latency_percentiles_and_a_memory_run() -> None:
    import asyncio

    import storage_latency

    from smg.storage.memory import MemoryStorage

    got = storage_latency.percentiles([i / 1e6 for i in range(1, 101)])
    assert got == {"p50_us": 50.0, "p99_us": 99.0, "max_us": 100.0}
    assert storage_latency.percentiles([]) == {"p50_us": 0.0, "p99_us": 0.0, "max_us": 0.0}
    result = asyncio.run(storage_latency.measure(MemoryStorage(), 30))
    assert set(result) == {"put_response", "get_response", "add_item", "list_items_20"}
    assert all(0 < r["p50_us"] <= r["p99_us"] <= r["max_us"] for r in result.values())


def test_token_path_cost_times_every_stage() -> None:
    import token_path_cost

    stages = token_path_cost._stages(200)  # each checks once that its stage did the work
    assert set(stages) == {"h2", "parse", "render"}
    assert all(run() > 0 for run in stages.values())
