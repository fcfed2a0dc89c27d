#!/usr/bin/env python3
"""User-space instructions per relayed read on the HTTP stream path, in one process, no sockets.

The path of one upstream read of a relayed stream (one chunked SSE event, as the shared fake
worker writes a token): the lean client's connection (`h1_pool._Conn.data_received`, httptools),
its piped `Body`, `flow.pipe.Pipe`, `api.edge_answers.EdgeWriter`, the edge's `EdgeResponse`,
the client connection's `ResponseWriter` framing, then a fake transport's `write` (a C call, no
syscall). Each tree runs under valgrind's callgrind twice, with 0 and with N reads:
(Ir(N) - Ir(0)) / N is its count per read, free of the box's load (the startup cancels out).
bench/instr_ab.sh counts a whole gateway instead; paced (one read a token), its timers and
wake-ups move it by +-2 %, more than one call less a read.

    .venv/bin/python bench/relay_read_cost.py --tree base=/tmp/base --tree new=.
    .venv/bin/python bench/relay_read_cost.py --reads 40000
    .venv/bin/python bench/relay_read_cost.py --events 16   # 16 events a read (an unpaced worker)

`--tree NAME=DIR` imports DIR/smg (default: this checkout). `--run N` is the child: N reads.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

EVENT = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1795915971,"model":'
    b'"fake-model","choices":[{"index":0,"delta":{"content":"ok "},"logprobs":null,'
    b'"finish_reason":null}]}\n\n'
)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class FakeTransport:
    """Takes writes and drops them; its methods are C calls, as uvloop's are."""

    def __init__(self) -> None:
        self.write = deque[bytes](maxlen=1).append  # the last write kept

    is_closing = staticmethod(bool)  # bool() is False
    pause_reading = resume_reading = close = staticmethod(bool)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def relay(reads: int, events: int) -> None:
    from smg.api.edge_answers import EdgeWriter
    from smg.core.idle import Watch
    from smg.edge.exchange import EdgeResponse, Timeouts
    from smg.edge.h1 import Limits, RequestHead
    from smg.edge.h1_write import ResponseWriter
    from smg.edge.protocol import H1Protocol
    from smg.flow.pipe import Pipe
    from smg.pipeline.backends.h1_pool import _Conn

    edge = H1Protocol(None, Limits(), Timeouts(), set())  # type: ignore[arg-type]
    client = FakeTransport()
    edge.transport = client  # type: ignore[assignment]
    edge.response = ResponseWriter(
        RequestHead(b"POST", b"/v1/chat/completions", "1.1", [], True, False, 2)
    )
    client.write(edge.response.head(200, ((b"Content-Type", b"text/event-stream"),)))
    before = edge.response.output
    up = _Conn(None, ("http", "127.0.0.1", 1))  # type: ignore[arg-type]
    up.connection_made(FakeTransport())  # type: ignore[arg-type]
    head = up.send(b"POST / HTTP/1.1\r\n\r\n", up.loop.time() + 3600)
    up.data_received(HEAD)
    body = (await head).content
    body.pipe(Pipe(body, EdgeWriter(EdgeResponse(edge)), Watch(lambda: None)))
    piece = b"%x\r\n%b\r\n" % (len(EVENT), EVENT) * events  # what one read brings
    framed = len(b"%x\r\n%b\r\n" % (len(EVENT) * events, EVENT * events))  # one chunk out
    feed = up.data_received
    for _ in range(reads):
        feed(piece)
    if edge.response.output - before != reads * framed:
        raise SystemExit(f"framed {edge.response.output - before} bytes, not {reads} chunks")
    if up.timer is not None:  # no pool to hand the connection back to: just its timer
        up.timer.cancel()


def instructions(tree: str, reads: int, events: int, out: str) -> int:
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    subprocess.run(
        [*cmd, __file__, "--run", str(reads), "--events", str(events)],
        env=env,
        check=True,
        capture_output=True,
    )
    for line in Path(out).read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = str(Path(__file__).resolve().parent.parent)
    ap.add_argument("--tree", action="append", help="NAME=DIR (repeatable); default this tree")
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--events", type=int, default=1, help="SSE events a read brings [1]")
    ap.add_argument("--run", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run is not None:
        import uvloop

        uvloop.run(relay(args.run, args.events))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.tree or [f"this={here}"]:
            name, _, tree = spec.partition("=")
            idle = instructions(tree, 0, args.events, f"{tmp}/{name}.0")
            busy = instructions(tree, args.reads, args.events, f"{tmp}/{name}.n")
            per = (busy - idle) / args.reads
            print(
                f"{name}: {per:.0f} Ir a read ({args.reads} reads of {args.events} events)",
                flush=True,
            )


if __name__ == "__main__":
    main()
