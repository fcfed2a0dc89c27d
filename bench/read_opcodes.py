"""Python bytecodes our gateway runs per engine read in gRPC mode, by function (A/B across trees).

A count, not a time: the same tree gives the same figure on a busy box (within ~1 %), and a run
takes seconds, not valgrind's minutes. Starts one `smg sim --grpc --runtime vllm` engine paced
at `--decode-ms` per token (the default, 5 ms, makes each token its own read of the engine's
connection at c=1), then per tree our gateway with `sys.settrace` opcode tracing switched on
inside `grpc_lean._Connection.data_received` only (everything that read runs: the h2 core, the
call, the normaliser, the renderer, the client write); drives `--requests` streams of
`--tokens` tokens at `--conc`, stops the gateway (SIGTERM) and prints opcodes per read, per
streamed frame, and the functions that run the most of them.

    .venv/bin/python bench/read_opcodes.py --tree new=.
    .venv/bin/python bench/read_opcodes.py --tree base=/tmp/smg_base --tree new=. --top 15
    .venv/bin/python bench/read_opcodes.py --tree new=. --conc 64 --decode-ms 0   # batched reads
    .venv/bin/python bench/read_opcodes.py --tree new=. --conc 64 --decode-ms 0 --requests 640 \
        --fake-engine ../shared/bench/fake_grpc_engine.py   # the engine vs_rust.sh measures with

An opcode costs ~20-25 instructions under callgrind here (`instr_ab.sh`), calls and C work
(protobuf, orjson, the write syscall) more: a cut that removes opcodes but adds a C call must
still be checked there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpc_token_cost import PY, REPO, _drive, _free_port, _spawn, _wait_http

SELF = str(Path(__file__).resolve())


def _serve(out: str, argv: list[str]) -> None:
    """(In the gateway's process) count opcodes per function inside every engine read, write
    them to `out` at exit, run `smg` with `argv`."""
    import atexit

    from smg.pipeline.backends import grpc_lean

    counts: Counter[str] = Counter()
    reads = 0

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_qualname} ({os.path.basename(code.co_filename)})"

        def local(frame, event, arg):  # type: ignore[no-untyped-def]
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    original = grpc_lean._Connection.data_received

    def data_received(self, data):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        sys.settrace(tracer)
        try:
            return original(self, data)
        finally:
            sys.settrace(None)

    grpc_lean._Connection.data_received = data_received  # type: ignore[method-assign]

    @atexit.register
    def dump() -> None:
        with open(out, "w") as f:
            json.dump({"reads": reads, "counts": counts}, f)

    from smg.cli import main

    sys.argv = ["smg", *argv]
    sys.exit(main())


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


async def _one(tree: str, engine: str, args: argparse.Namespace, out: str) -> tuple[dict, int]:
    port = _free_port()
    cmd = [PY, SELF, "--serve", out, "launch", "--host", "127.0.0.1",
           "--port", str(port), "--worker-urls", engine, "--model-path", args.tokenizer,
           "--policy", "round_robin", "--log-level", "warn"]  # fmt: skip
    gw = _spawn(cmd, tree, tree)
    try:
        await _wait_http(f"http://127.0.0.1:{port}/v1/models", gw)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        for _ in range(120):  # until the engine is healthy behind it
            try:
                await _drive(url, 1, 1, 1, args.model)
                break
            except AssertionError:
                await asyncio.sleep(0.25)
        await _drive(url, args.conc, args.conc, args.tokens, args.model)  # warm-up
        frames = await _drive(url, args.requests, args.conc, args.tokens, args.model)
    finally:
        gw.send_signal(signal.SIGTERM)
        gw.wait(30)
    return _load(out), frames


async def _run(args: argparse.Namespace, trees: list[tuple[str, str]]) -> None:
    eport = _free_port()
    if args.fake_engine:  # the shared harness's engine (what vs_rust.sh and instr_ab.sh run)
        rate = ["--token-rate", str(1000 / args.decode_ms)] if args.decode_ms else []
        sim = _spawn([args.grpc_python, args.fake_engine, "--host", "127.0.0.1",
                      "--port", str(eport), "--tokenizer-dir", args.tokenizer, *rate],
                     str(REPO), str(REPO))  # fmt: skip
    else:
        sim = _spawn([PY, "-m", "smg", "sim", "--grpc", "--runtime", "vllm", "--chunk-tokens",
                      "1", "--tokenizer-dir", args.tokenizer, "--decode-ms-per-token",
                      str(args.decode_ms), "--port", str(eport)], str(REPO), str(REPO))  # fmt: skip
    try:
        await asyncio.sleep(2)
        with tempfile.TemporaryDirectory() as tmp:
            for name, tree in trees:
                data, frames = await _one(tree, f"grpc://127.0.0.1:{eport}", args, f"{tmp}/o.json")
                counts = Counter(data["counts"])
                reads, total = data["reads"], sum(counts.values())
                per_read, per_frame = total / max(reads, 1), total / max(frames, 1)
                print(f"{name} ({tree}): {reads} reads, {frames} frames; opcodes per read "
                      f"{per_read:.0f}, per frame {per_frame:.0f}")  # fmt: skip
                for key, n in counts.most_common(args.top):
                    print(f"  {n / max(reads, 1):7.1f}  {key}")
    finally:
        sim.terminate()
        sim.wait(10)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument(
        "--decode-ms", type=float, default=5, help="the engine's ms a token (0: unpaced)"
    )
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--fake-engine", help="the shared harness's fake_grpc_engine.py (else smg sim)")
    ap.add_argument(
        "--grpc-python",
        default=str(Path.home() / ".cache/smg-bench/venv-grpc-proto/bin/python"),
        help="the python that runs --fake-engine",
    )
    ap.add_argument("--tokenizer", default=str(Path.home() / ".cache/smg-bench/tiny-tok"))
    args = ap.parse_args()
    args.model = "fake-model" if args.fake_engine else "sim-model"
    trees = [(n, os.path.abspath(d)) for n, d in (t.split("=", 1) for t in args.tree)]
    asyncio.run(_run(args, trees))


if __name__ == "__main__":
    main()
