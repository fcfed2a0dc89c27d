"""Routing-policy A/B: the same open-loop workload through the gateway once per policy.

For each policy: start `--engines` simulated vLLM gRPC engines (`smg sim --grpc`, with prefill
speed, decode latency, a finite KV cache and a 16-token-block prefix cache) and one gateway in
front of them, replay one seeded request schedule (Poisson arrivals at `--rate`; `--shared-share`
of the requests open with one of `--prefixes` ~1,000-token system prompts, picked uniformly or
Zipf-like with `--zipf`; the rest are unique), then stop everything. Every policy sees identical
requests at identical offsets, on fresh (cold) engines.

Per policy: prefix-cache hit rate (cached / prompt tokens, from the engines' `cached_tokens` in
the streamed usage), the cached tokens' sum (prefill the engines skipped), TTFT and end-to-end
p50/p99 (measured from each request's *scheduled* arrival, so client lag counts against the
gateway, not for it), completed req/s, requests per engine (the engines' own counters) and
max/mean load. The markdown table goes to stdout and to
`bench/results/policy-ab-<time>.md`, raw JSON to `.json` next to it.

    .venv/bin/python bench/policy_ab.py                       # 5 policies, ~5 min
    .venv/bin/python bench/policy_ab.py --policies round_robin,cache_aware --rate 6
    .venv/bin/python bench/policy_ab.py --policies round_robin,cache_aware_tree_only,cache_aware
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from smg.config import POLICIES, RoutingConfig  # noqa: E402
from smg.pipeline.policies import make_policy  # noqa: E402
from smg.sim.tokenizer_files import qwen3_tokenizer_dir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import stop_all  # noqa: E402

DEFAULT_POLICIES = "round_robin,power_of_two,cache_aware,prefix_hash,least_load"
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    # cache_aware on the approximate prefix tree alone; plain `cache_aware` also follows the
    # engines' KV events (SubscribeKvEvents) in gRPC mode.
    "cache_aware_tree_only": ("cache_aware", ("--disable-kv-events",)),
}
"""Row label -> (policy, extra `smg launch` flags)."""


def resolve(label: str) -> tuple[str, tuple[str, ...]]:
    return VARIANTS.get(label, (label, ()))


SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "be", "fi")


# ---------------------------------------------------------------- the workload (pure)


@dataclass(frozen=True, slots=True)
class Req:
    at_s: float  # scheduled offset from the start of the run
    system: str
    user: str
    prefix_id: int  # -1: a fully unique request


def _vocab(rng: random.Random, n: int = 4000) -> list[str]:
    return ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(n)]


def _text(rng: random.Random, vocab: list[str], words: int) -> str:
    return " ".join(rng.choices(vocab, k=words))


def workload(
    n: int, rate: float, prefixes: int, prefix_words: int, shared_share: float, zipf_s: float,
    seed: int,
) -> list[Req]:  # fmt: skip
    """`n` requests with Poisson arrivals at `rate`/s; the same list for the same arguments."""
    rng = random.Random(seed)
    vocab = _vocab(rng)
    systems = [f"You are agent {k}. " + _text(rng, vocab, prefix_words) for k in range(prefixes)]
    cum = list(itertools.accumulate((k + 1) ** -zipf_s for k in range(prefixes)))
    out: list[Req] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        user = f"Question {i}: " + _text(rng, vocab, rng.randint(8, 24))
        if rng.random() < shared_share:
            k = rng.choices(range(prefixes), cum_weights=cum)[0]
            out.append(Req(t, systems[k], user, k))
        else:
            out.append(Req(t, f"You are agent u{i}. " + _text(rng, vocab, prefix_words), user, -1))
    return out


# ---------------------------------------------------------------- results (pure)


@dataclass(slots=True)
class Outcome:
    ok: bool
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    lag_s: float = 0.0  # how late the client sent it
    done_at_s: float = 0.0
    error: str = ""


def pct(xs: list[float], p: float) -> float | None:
    """Nearest-rank percentile; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def summarise(policy: str, outcomes: list[Outcome], engine_requests: list[int]) -> dict:
    ok = [o for o in outcomes if o.ok]
    prompt = sum(o.prompt_tokens for o in ok)
    ttft = [o.ttft_s for o in ok if o.ttft_s is not None]
    e2e = [o.e2e_s for o in ok if o.e2e_s is not None]
    span = max((o.done_at_s for o in ok), default=0.0)
    mean_load = statistics.fmean(engine_requests) if engine_requests else 0.0
    return {
        "policy": policy,
        "requests": len(outcomes),
        "ok": len(ok),
        "errors": len(outcomes) - len(ok),
        "hit_rate": sum(o.cached_tokens for o in ok) / prompt if prompt else 0.0,
        "cached_tokens": sum(o.cached_tokens for o in ok),  # prefill the engines skipped
        "prompt_tokens_mean": prompt / len(ok) if ok else 0.0,
        "ttft_p50_ms": _ms(pct(ttft, 50)),
        "ttft_p99_ms": _ms(pct(ttft, 99)),
        "e2e_p50_ms": _ms(pct(e2e, 50)),
        "e2e_p99_ms": _ms(pct(e2e, 99)),
        "throughput_rps": len(ok) / span if span else 0.0,
        "engine_requests": engine_requests,
        "max_mean_load": max(engine_requests) / mean_load if mean_load else 0.0,
        "lag_p99_ms": _ms(pct([o.lag_s for o in outcomes], 99)),
    }


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000, 1)


def _f(x: float | None, fmt: str = ".0f") -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: list[dict]) -> str:
    head = ("| policy | ok/err | hit rate | prefill tokens saved | TTFT p50 ms | TTFT p99 ms "
            "| e2e p50 ms | e2e p99 ms | req/s | requests per engine | max/mean "
            "| client lag p99 ms |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")  # fmt: skip
    lines = [
        f"| {r['policy']} | {r['ok']}/{r['errors']} | {r['hit_rate']:.1%} "
        f"| {r.get('cached_tokens', 0):,} "
        f"| {_f(r['ttft_p50_ms'])} | {_f(r['ttft_p99_ms'])} | {_f(r['e2e_p50_ms'])} "
        f"| {_f(r['e2e_p99_ms'])} | {r['throughput_rps']:.2f} "
        f"| {' / '.join(map(str, r['engine_requests']))} | {r['max_mean_load']:.2f} "
        f"| {_f(r['lag_p99_ms'])} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def goals(rows: list[dict]) -> list[str]:
    """Issue 5's bar: cache_aware >= 2x round_robin's hit rate, lower TTFT p99, max/mean <= 1.5."""
    by = {r["policy"]: r for r in rows}
    ca, rr = by.get("cache_aware"), by.get("round_robin")
    if ca is None or rr is None:
        return ["goals: need both cache_aware and round_robin in the run"]
    ratio = ca["hit_rate"] / rr["hit_rate"] if rr["hit_rate"] else math.inf
    p99_ok = None not in (ca["ttft_p99_ms"], rr["ttft_p99_ms"])
    lower = p99_ok and ca["ttft_p99_ms"] < rr["ttft_p99_ms"]
    return [
        f"- hit rate cache_aware / round_robin = {ratio:.2f} (goal >= 2): "
        + ("met" if ratio >= 2 else "NOT met"),
        f"- TTFT p99 cache_aware {_f(ca['ttft_p99_ms'])} ms vs round_robin "
        f"{_f(rr['ttft_p99_ms'])} ms (goal lower): " + ("met" if lower else "NOT met"),
        f"- cache_aware max/mean engine load {ca['max_mean_load']:.2f} (goal <= 1.5): "
        + ("met" if ca["max_mean_load"] <= 1.5 else "NOT met"),
    ]


def repeat_share(reqs: list[Req]) -> float:
    """Share of requests whose prefix was sent before: about the best possible hit rate."""
    seen: set[int] = set()
    repeats = 0
    for r in reqs:
        repeats += r.prefix_id in seen
        if r.prefix_id >= 0:
            seen.add(r.prefix_id)
    return repeats / len(reqs) if reqs else 0.0


def available(names: list[str]) -> tuple[list[str], list[str]]:
    """Split `names` into policies this checkout's gateway can build and the rest."""
    ok, missing = [], []
    for label in names:
        name = resolve(label)[0]
        try:
            if name not in POLICIES:
                raise ValueError(name)
            make_policy(name, RoutingConfig(), random.Random(0), time.monotonic)
            ok.append(label)
        except Exception:  # any failure to build means "not available here"
            missing.append(label)
    return ok, missing


# ---------------------------------------------------------------- processes


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.loads(r.read()) if r.status == 200 else None
    except (OSError, ValueError):
        return None


class Cluster:
    """Engines + gateway for one policy; a context manager that stops what it started, by pid."""

    def __init__(self, args: argparse.Namespace, policy: str, logdir: Path) -> None:
        self.args, self.policy, self.logdir = args, policy, logdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stats_urls: list[str] = []
        self.url = ""
        self.model = ""

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONSAFEPATH="1")
        with open(self.logdir / f"{self.policy}-{name}.log", "wb") as log:
            p = subprocess.Popen([self.args.python, "-m", "smg", *argv], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 cwd=REPO, start_new_session=True)  # fmt: skip
        self.procs.append(p)
        return p

    def __enter__(self) -> Cluster:
        a = self.args
        try:
            urls = []
            for i in range(a.engines):
                port, sport = free_port(), free_port()
                self._spawn(f"engine{i}", [
                    "sim", "--grpc", "--runtime", "vllm", "--host", "127.0.0.1",
                    "--port", str(port), "--stats-port", str(sport), "--seed", str(i),
                    "--prefill-tokens-per-s", str(a.prefill_tps),
                    "--decode-ms-per-token", str(a.decode_ms),
                    "--decode-ms-per-running", str(a.decode_ms_per_running),
                    "--kv-capacity-tokens", str(a.kv_tokens), "--block-size", "16",
                    "--max-batch", str(a.max_batch),
                ])  # fmt: skip
                urls.append(f"grpc://127.0.0.1:{port}")
                self.stats_urls.append(f"http://127.0.0.1:{sport}/sim/stats")
            gport = free_port()
            policy, flags = resolve(self.policy)
            gw = self._spawn("gateway", [
                "launch", "--host", "127.0.0.1", "--port", str(gport), "--worker-urls", *urls,
                "--policy", policy, "--tokenizer-path", str(qwen3_tokenizer_dir()),
                "--prometheus-port", "0", "--health-check-interval-secs", "1",
                "--log-level", "warn", *flags, *a.gateway_args.split(),
            ])  # fmt: skip
            self.url = f"http://127.0.0.1:{gport}"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for p in self.procs:
                    if p.poll() is not None:
                        raise RuntimeError(
                            f"pid {p.pid} exited ({p.returncode}); see {self.logdir}"
                        )
                ready = _get_json(self.url + "/readiness") or {}
                models = (_get_json(self.url + "/v1/models") or {}).get("data") or []
                stats = [_get_json(u) for u in self.stats_urls]
                if ready.get("healthy_workers") == a.engines and models and None not in stats:
                    self.model = models[0]["id"]
                    return self
                time.sleep(0.2)
            raise RuntimeError(f"gateway {gw.pid} not ready with {a.engines} engines after 60 s")
        except BaseException:
            self.stop()
            raise

    def engine_requests(self) -> list[int]:
        return [int((_get_json(u) or {}).get("requests", -1)) for u in self.stats_urls]

    def exited(self) -> dict[str, int]:
        """Processes that are no longer running, with their exit status (-N: killed by signal N)."""
        names = [f"engine{i}" for i in range(len(self.procs) - 1)] + ["gateway"]
        return {
            n: p.returncode for n, p in zip(names, self.procs, strict=True) if p.poll() is not None
        }

    def cpu_s(self) -> dict[str, float]:
        out = {}
        for i, p in enumerate(self.procs):
            try:
                t = psutil.Process(p.pid).cpu_times()
                out["gateway" if i == len(self.procs) - 1 else f"engine{i}"] = t.user + t.system
            except psutil.Error:
                pass
        return out

    def stop(self) -> None:
        stop_all(self.procs)

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------- the open-loop client


async def _one(session, url: str, model: str, req: Req, t0: float, max_tokens: int) -> Outcome:  # type: ignore[no-untyped-def]
    import aiohttp

    sent = time.monotonic()
    start = t0 + req.at_s  # latency counts from the scheduled arrival
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": req.system},
                         {"role": "user", "content": req.user}]}  # fmt: skip
    out = Outcome(ok=False, lag_s=sent - start)
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return out
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                if out.ttft_s is None and any(
                    (c.get("delta") or {}).get("content") for c in obj.get("choices") or ()
                ):
                    out.ttft_s = time.monotonic() - start
                usage = obj.get("usage")
                if usage:
                    out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    details = usage.get("prompt_tokens_details") or {}
                    out.cached_tokens = int(details.get("cached_tokens") or 0)
        now = time.monotonic()
        out.ok, out.e2e_s, out.done_at_s = True, now - start, now - t0
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        out.error = f"{type(e).__name__}: {e}"[:200]
    return out


async def drive(
    url: str, model: str, reqs: list[Req], max_tokens: int, max_s: float
) -> list[Outcome]:
    """Send each request at its offset (open loop) until `max_s`; wait for the answers."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=max_s + 30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:  # fmt: skip
        tasks = []
        async with asyncio.TaskGroup() as tg:
            t0 = time.monotonic()
            for r in reqs:
                if r.at_s > max_s:
                    break
                delay = t0 + r.at_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(tg.create_task(_one(session, url, model, r, t0, max_tokens)))
    return [t.result() for t in tasks]


def run_policy(args: argparse.Namespace, policy: str, reqs: list[Req], logdir: Path) -> dict:
    with Cluster(args, policy, logdir) as c:
        before, cpu0, w0 = c.engine_requests(), c.cpu_s(), time.monotonic()
        outcomes = asyncio.run(drive(c.url, c.model, reqs, args.max_tokens, args.max_run_s))
        wall = time.monotonic() - w0
        after, cpu1, exited = c.engine_requests(), c.cpu_s(), c.exited()
    row = summarise(policy, outcomes, [b - a for a, b in zip(before, after, strict=True)])
    row["exited_during_run"] = exited  # e.g. killed from outside: the row is not valid
    if exited:
        print(f"{policy}: INVALID, processes exited during the run: {exited}", flush=True)
    row["cpu_pct"] = {k: round(100 * (cpu1[k] - cpu0.get(k, 0.0)) / wall, 1) for k in cpu1}
    row["first_errors"] = [o.error for o in outcomes if not o.ok][:3]
    row["wall_s"] = round(wall, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=fmt)
    ap.add_argument("--policies", default=DEFAULT_POLICIES,
                    help=f"comma-separated; also {', '.join(VARIANTS)}")  # fmt: skip
    ap.add_argument("--rate", type=float, default=16.0, help="arrivals per second (Poisson)")
    ap.add_argument("--requests", type=int, default=640, help="requests per policy")
    ap.add_argument("--max-run-s", type=float, default=40.0, help="stop sending after this")
    ap.add_argument("--prefixes", type=int, default=200, help="distinct shared system prompts")
    ap.add_argument("--prefix-words", type=int, default=560,
                    help="words per system prompt (~1.8 Qwen3 tokens each)")  # fmt: skip
    ap.add_argument("--shared-share", type=float, default=0.7, help="share with a shared prefix")
    ap.add_argument(
        "--zipf", type=float, default=0.0, help="prefix popularity ~ rank**-zipf (0: uniform)"
    )
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--prefill-tps", type=float, default=8000.0, help="engine prefill tokens/s")
    ap.add_argument("--decode-ms", type=float, default=15.0, help="engine ms per decode step")
    ap.add_argument("--decode-ms-per-running", type=float, default=0.1)
    ap.add_argument("--kv-tokens", type=int, default=80_000, help="engine KV capacity (tokens)")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--gateway-args", default="", help="extra `smg launch` flags")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--out", type=Path, default=None, help="raw JSON path (default: timestamped)")
    args = ap.parse_args(argv)

    policies, missing = available([p.strip() for p in args.policies.split(",") if p.strip()])
    if missing:
        print(f"not available in this checkout (skipped): {', '.join(missing)}", flush=True)
    reqs = workload(args.requests, args.rate, args.prefixes, args.prefix_words,
                    args.shared_share, args.zipf, args.seed)  # fmt: skip
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.out or args.results / f"policy-ab-{time.strftime('%Y%m%d-%H%M%S')}.json"
    logdir = out.parent / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    sent = [r for r in reqs if r.at_s <= args.max_run_s]
    ceiling = repeat_share(sent)
    rows = []
    for policy in policies:
        print(f"{policy}: {len(sent)} requests at "
              f"{args.rate}/s ...", flush=True)  # fmt: skip
        rows.append(run_policy(args, policy, reqs, logdir))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    text = (
        table(rows)
        + f"\nRequests whose prefix was sent before (about the best possible hit rate, less the"
        f" tail after the last full 16-token block): {ceiling:.1%}\n\n"
        + "\n".join(goals(rows))
        + "\n"
    )
    if missing:
        text += f"\nNot available (skipped): {', '.join(missing)}\n"
    print("\n" + text)
    out.write_text(
        json.dumps(
            {"args": meta, "skipped": missing, "repeat_share": ceiling, "rows": rows}, indent=1
        )
    )
    out.with_suffix(".md").write_text(text)
    print(f"raw: {out}")
    return 0 if rows and all(r["ok"] and not r["exited_during_run"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
