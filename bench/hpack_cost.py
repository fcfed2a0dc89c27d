"""HPACK decoding on the lean gRPC path: our `smg.pipeline.backends.hpack` against PyPI `hpack`.

Issue 10 asks to use the PyPI `hpack` package instead of the hand-written decoder if it costs no
measurable CPU per token. This measures exactly what the gateway decodes: the header blocks a
real gRPC C-core server (the simulated engine is grpc.aio, the server vLLM and SGLang use)
sends on one connection, in order (response headers and trailers of each Generate call, the
first ones Huffman literals that fill the dynamic table, the later ones mostly indexed), captured
from `smg sim --grpc`. Both decoders replay the same sequence from a fresh state, interleaved
A, B, A, B, ...; the figure is CPU time (process_time) per call, then amortised per streamed
token for typical answer lengths. Needs `pip install hpack` (not a dependency of smg).

    .venv/bin/python bench/hpack_cost.py                  # ~20 s
    .venv/bin/python bench/hpack_cost.py --calls 400 --reps 9
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
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from smg.pipeline.backends import hpack as ours  # noqa: E402
from smg.pipeline.backends.grpc_contract import SERVICE_NAMES, VLLM  # noqa: E402
from smg.pipeline.backends.grpc_lean import LeanChannel  # noqa: E402
from smg.pipeline.backends.grpc_requests import build_generate  # noqa: E402
from smg.pipeline.engine_types import EngineRequest, SamplingParams  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_engine() -> tuple[subprocess.Popen[bytes], int]:
    port, stats = _free_port(), _free_port()
    cmd = [sys.executable, "-m", "smg", "sim", "--grpc", "--runtime", VLLM, "--model", "m",
           "--host", "127.0.0.1", "--port", str(port), "--stats-port", str(stats)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


async def capture(port: int, calls: int, tokens: int) -> list[bytes]:
    """The header blocks of `calls` Generate calls on one lean connection to a sim engine."""
    blocks: list[bytes] = []
    real_decode = ours.Decoder.decode

    def recording(self: ours.Decoder, block: bytes, max_list_size: int | None = None) -> list:
        blocks.append(bytes(block))
        return real_decode(self, block, max_list_size)

    ours.Decoder.decode = recording  # type: ignore[method-assign]
    try:
        deadline = time.monotonic() + 60
        channel = LeanChannel(f"127.0.0.1:{port}")
        path = f"/{SERVICE_NAMES[VLLM]}/Generate"
        sampling = SamplingParams(max_tokens=tokens)
        for i in range(calls):
            req = EngineRequest(f"bench-{i}", (1, 2, 3, 4), sampling, stream=True)
            message = build_generate(VLLM, req).SerializeToString()
            while True:
                try:
                    call = await channel.start(path, message, timeout_s=30)
                    while await call.read_batch():
                        pass
                    break
                except Exception:
                    if i or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)  # the engine is still starting
        await channel.close()
    finally:
        ours.Decoder.decode = real_decode  # type: ignore[method-assign]
    return blocks


def replay_ours(blocks: Sequence[bytes]) -> None:
    d = ours.Decoder()
    for block in blocks:
        d.decode(block, 65_536)


def replay_pypi(blocks: Sequence[bytes]) -> None:
    import hpack

    d = hpack.Decoder()
    d.max_header_list_size = 65_536
    for block in blocks:
        d.decode(block)


def cpu_us_per_call(fn: Callable[[Sequence[bytes]], None], blocks: Sequence[bytes], calls: int,
                    loops: int) -> float:  # fmt: skip
    t0 = time.process_time()
    for _ in range(loops):
        fn(blocks)
    return (time.process_time() - t0) / loops / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200, help="Generate calls captured")
    ap.add_argument("--reps", type=int, default=7, help="interleaved rounds per decoder")
    ap.add_argument("--loops", type=int, default=50, help="replays of the sequence per round")
    args = ap.parse_args()
    try:
        import hpack
    except ImportError:
        sys.exit("needs the PyPI package: .venv/bin/pip install hpack")

    proc, port = start_engine()
    try:
        blocks = asyncio.run(capture(port, args.calls, tokens=8))
    finally:
        proc.terminate()
        proc.wait(10)
    sizes = [len(b) for b in blocks]
    print(f"captured {len(blocks)} header blocks from {args.calls} calls "
          f"(first {sizes[:4]} bytes, then median {statistics.median(sizes)} bytes)")  # fmt: skip
    # both decoders must agree before timing means anything
    mine, theirs = ours.Decoder(), hpack.Decoder()
    for block in blocks:
        assert mine.decode(block) == [tuple(h) for h in theirs.decode(block)], block

    results: dict[str, list[float]] = {"ours": [], "pypi hpack": []}
    fns = {"ours": replay_ours, "pypi hpack": replay_pypi}
    for rep in range(args.reps):
        order = list(fns) if rep % 2 == 0 else list(reversed(fns))
        for name in order:
            results[name].append(cpu_us_per_call(fns[name], blocks, args.calls, args.loops))
    print(
        f"\nCPU-us per Generate call (headers + trailers), median of {args.reps} rounds, "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, hpack {hpack.__version__}"
    )
    print("| decoder | us/call | min | max | us/token at 16 / 64 / 256 tokens |")
    print("|---|---|---|---|---|")
    for name, values in results.items():
        med = statistics.median(values)
        per_token = " / ".join(f"{med / n:.3f}" for n in (16, 64, 256))
        print(f"| {name} | {med:.2f} | {min(values):.2f} | {max(values):.2f} | {per_token} |")
    first = blocks[: 2 * 4]  # the first calls: Huffman literals fill the dynamic table
    for name, fn in fns.items():
        t = statistics.median(cpu_us_per_call(fn, first, 4, 200) for _ in range(5))
        print(f"cold connection, first 4 calls, {name}: {t:.2f} us/call")


if __name__ == "__main__":
    main()
