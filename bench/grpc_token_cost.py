"""Gateway CPU per streamed token in gRPC mode (A/B across source trees, interleaved).

Starts one `smg sim --grpc --runtime vllm --chunk-tokens 1` engine (unpaced) and, per rep and
tree, our gateway in front of it as subprocesses on 127.0.0.1; drives N streaming chat requests
of TOKENS tokens at a fixed concurrency from this process (aiohttp); reports the gateway's CPU
(user+sys of all its threads, psutil) per streamed token. Trees alternate A, B, A, B, ...

    .venv/bin/python bench/grpc_token_cost.py --tree base=/tmp/smg_base --tree new=.
    .venv/bin/python bench/grpc_token_cost.py --tree new=. --reps 1 --conc 1
    .venv/bin/python bench/grpc_token_cost.py --tree plain=. --tree tls=.:tls

Each `--tree NAME=DIR` puts DIR first on the gateway's PYTHONPATH (DIR/smg is imported); a
`DIR:tls` tree reaches a second engine, serving gRPC over mutual TLS, at grpcs:// (throwaway
certificates from `trustme`, a test dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def _spawn(cmd: list[str], cwd: str, pythonpath: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONSAFEPATH": "1"}
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"process exited ({proc.returncode})")
            try:
                async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200 and "data" in await r.text():
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.25)
    raise RuntimeError(f"{url} not ready")


async def _drive(url: str, n: int, conc: int, tokens: int, model: str = "sim-model") -> int:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello, how are you?"}],
        "max_tokens": tokens,
        "stream": True,
        "ignore_eos": True,
    }
    left = n
    frames = 0

    async def worker(s: aiohttp.ClientSession) -> None:
        nonlocal left, frames
        while left > 0:
            left -= 1
            async with s.post(url, json=body) as r:
                assert r.status == 200, r.status
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        frames += 1

    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn) as s:
        await asyncio.gather(*(worker(s) for _ in range(conc)))
    return frames


async def _one(tree: str, engine: str, tok: str, args: argparse.Namespace, tls: list[str]) -> float:
    port = _free_port()
    cmd = [PY, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port),
           "--worker-urls", engine, "--model-path", tok,
           "--policy", "round_robin", "--log-level", "warn", *tls]  # fmt: skip
    gw = _spawn(cmd, tree, tree)
    try:
        await _wait_http(f"http://127.0.0.1:{port}/v1/models", gw)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        async with aiohttp.ClientSession() as s:  # until the engine is healthy behind it
            for _ in range(120):
                async with s.post(
                    url,
                    json={
                        "messages": [{"role": "user", "content": "x"}],
                        "model": "sim-model",
                        "max_tokens": 1,
                    },
                ) as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.25)
        await _drive(url, args.conc * 2, args.conc, args.tokens)  # warm-up
        p = psutil.Process(gw.pid)
        t0 = p.cpu_times()
        frames = await _drive(url, args.requests, args.conc, args.tokens)
        t1 = p.cpu_times()
        cpu = (t1.user - t0.user) + (t1.system - t0.system)
        return cpu * 1e6 / frames
    finally:
        gw.terminate()
        gw.wait(10)


def _tree(spec: str) -> str:
    path, tls = (spec[:-4], ":tls") if spec.endswith(":tls") else (spec, "")
    return os.path.abspath(path) + tls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--tokenizer", default=str(Path.home() / ".cache/smg-bench/tiny-tok"))
    args = ap.parse_args()
    trees = [(n, _tree(d)) for n, d in (t.split("=", 1) for t in args.tree)]
    asyncio.run(_run(args, trees))


def _certs(folder: str) -> tuple[list[str], list[str]]:
    """(engine flags, gateway flags) for gRPC over mutual TLS with throwaway certificates."""
    import trustme

    ca = trustme.CA()
    srv, cli = ca.issue_cert("127.0.0.1"), ca.issue_cert("smg-gateway")
    blobs = {
        "ca": ca.cert_pem,
        "srv": srv.cert_chain_pems[0],
        "srv_key": srv.private_key_pem,
        "cli": cli.cert_chain_pems[0],
        "cli_key": cli.private_key_pem,
    }
    paths = {name: os.path.join(folder, f"{name}.pem") for name in blobs}
    for name, blob in blobs.items():
        blob.write_to_path(paths[name])
    engine = ["--tls-cert-path", paths["srv"], "--tls-key-path", paths["srv_key"],
              "--tls-client-ca-path", paths["ca"]]  # fmt: skip
    gateway = ["--ca-cert-paths", paths["ca"], "--client-cert-path", paths["cli"],
               "--client-key-path", paths["cli_key"]]  # fmt: skip
    return engine, gateway


async def _run(args: argparse.Namespace, trees: list[tuple[str, str]]) -> None:
    import tempfile

    sim_cmd = [PY, "-m", "smg", "sim", "--grpc", "--runtime", "vllm", "--chunk-tokens", "1"]
    sim_cmd += ["--tokenizer-dir", args.tokenizer]
    sims: list[subprocess.Popen[bytes]] = []
    engines: dict[bool, tuple[str, list[str]]] = {}  # TLS? -> (URL, gateway flags)
    results: dict[str, list[float]] = {name: [] for name, _ in trees}
    with tempfile.TemporaryDirectory() as certs:
        for tls in sorted({tree.endswith(":tls") for _, tree in trees}):
            eport = _free_port()
            engine_tls, gateway_tls = _certs(certs) if tls else ([], [])
            sims.append(_spawn([*sim_cmd, "--port", str(eport), *engine_tls], str(REPO), str(REPO)))
            url = f"{'grpcs' if tls else 'grpc'}://127.0.0.1:{eport}"
            engines[tls] = (url, gateway_tls)
        try:
            await asyncio.sleep(2)
            for rep in range(args.reps):
                for name, tree in trees:
                    url, flags = engines[tree.endswith(":tls")]
                    us = await _one(tree.removesuffix(":tls"), url, args.tokenizer, args, flags)
                    results[name].append(us)
                    print(f"rep {rep} {name}: {us:.1f} CPU-us/token", flush=True)
        finally:
            for sim in sims:
                sim.terminate()
                sim.wait(10)
    for name, vals in results.items():
        print(f"{name}: median {statistics.median(vals):.1f} CPU-us/token  {vals}")
    if len(trees) == 2:
        a, b = (results[n] for n, _ in trees)
        ratios = [y / x for x, y in zip(a, b, strict=True)]
        print(f"paired {trees[1][0]}/{trees[0][0]}: {[round(r, 3) for r in ratios]}")


if __name__ == "__main__":
    main()
