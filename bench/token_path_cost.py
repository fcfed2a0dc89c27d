"""CPU per streamed token of the gRPC path's pure stages, in one process (no sockets, no loop).

One vLLM `GenerateResponse` chunk of one token, framed as gRPC in one HTTP/2 DATA frame, goes
through the stages the gateway runs per token, each timed alone over N tokens:

  h2      ClientConnection.receive + consumed (the lean HTTP/2 client's core and its credit)
  parse   GenerateResponse.FromString + ResponseNormaliser.feed (upb, our normaliser)
  render  OutputShaper.on_event: detokenize, stop matcher, the SSE frame (plain chat)

    .venv/bin/python bench/token_path_cost.py                   # this tree, 20,000 tokens, 3 reps
    .venv/bin/python bench/token_path_cost.py --tree /tmp/base  # another tree's smg (A/B)

`--tree DIR` imports DIR/smg instead of this checkout's. The decode function is a byte-level
stand-in (one char per id), so the HF tokenizer's own cost (~2 µs per token) is not included.
The box's other load moves every figure: compare trees in alternation, as `--tree` runs do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def _stages(n: int) -> dict[str, Callable[[], float]]:
    from smg_grpc_proto.generated import vllm_engine_pb2 as pb

    from smg.pipeline.backends import hpack
    from smg.pipeline.backends.grpc_replies import ResponseNormaliser
    from smg.pipeline.backends.h2_client import MESSAGES, ClientConnection
    from smg.pipeline.backends.h2_frames import DATA, FLAG_END_HEADERS, HEADERS_FRAME, frame
    from smg.pipeline.choice import OutputSpec
    from smg.pipeline.output import OutputShaper

    chunk = pb.GenerateStreamChunk(token_ids=[107], prompt_tokens=20, completion_tokens=1)
    msg = pb.GenerateResponse(chunk=chunk).SerializeToString()
    grpc_msg = b"\x00" + len(msg).to_bytes(4, "big") + msg

    def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def h2() -> float:
        conn = ClientConnection()
        conn.data_to_send()
        sid = conn.start_call(hpack.encode([(":path", "/x")]), b"req")
        conn.data_to_send()
        status = hpack.encode([(":status", "200")])
        conn.receive(frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, status))
        data = frame(DATA, 0, sid, grpc_msg)
        receive, consumed, size = conn.receive, conn.consumed, len(grpc_msg)
        assert receive(data) == [(MESSAGES, sid, [msg])]  # the frame is what the stage measures
        consumed(sid, size)
        t = time.perf_counter()
        for _ in range(n):
            receive(data)
            consumed(sid, size)
        return time.perf_counter() - t

    def parse() -> float:
        parse_msg = pb.GenerateResponse.FromString
        feed = ResponseNormaliser("vllm", stream=True, n=1).feed
        t = time.perf_counter()
        for _ in range(n):
            feed(parse_msg(msg))
        return time.perf_counter() - t

    def render() -> float:
        spec = OutputSpec(response_id="chatcmpl-x", model="fake-model", created=1, chat=True)
        shaper = OutputShaper(spec, decode)
        feed = ResponseNormaliser("vllm", stream=True, n=1).feed
        events: list[Any] = [feed(pb.GenerateResponse.FromString(msg)) for _ in range(n)]
        on_event = shaper.on_event
        assert b'"content":"k"' in on_event(events.pop())[-1]  # the role frame, then the text
        t = time.perf_counter()
        for ev in events:
            on_event(ev)
        return time.perf_counter() - t

    return {"h2": h2, "parse": parse, "render": render}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    sys.path.insert(0, args.tree)
    stages = _stages(args.tokens)
    per_token: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(args.reps):
        for name, run in stages.items():
            per_token[name].append(run() / args.tokens * 1e6)
    print(f"tree {args.tree}: µs per token, median of {args.reps} (min-max)")
    for name, values in per_token.items():
        low, high = min(values), max(values)
        print(f"  {name:7s} {statistics.median(values):6.2f}  ({low:.2f}-{high:.2f})")


if __name__ == "__main__":
    main()
