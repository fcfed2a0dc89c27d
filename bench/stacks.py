#!/usr/bin/env python3
"""Summarise a py-spy profile in collapsed-stack form (`py-spy record --format raw`).

Each input line is `frame;frame;...;leaf COUNT`, a frame being `function (file:line)`. Frames are
merged across line numbers, so a function counts once however many of its lines were sampled.
Prints, as markdown: the share of samples per group (where the leaf frame's file lives: aiohttp
server, aiohttp client, our middleware, routing, ...; in gRPC mode also grpc.aio, protobuf, our
output shaper and detokenizer, HF tokenizers calls, template + tokenize), then the top frames by
own time (the leaf of a sample: time spent in that function or in C code it called, since py-spy
without --native sees no C frames) and by cumulative time (on the stack at all). `--main-thread`
keeps the event loop's thread only; `--drop-idle` drops samples blocked in a wait (--native).

    python bench/stacks.py bench/results/profile-chat-c64-<time>.txt [--top 15]

Pure: parsing and grouping take text and return data, so they can be tested without py-spy.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

LOOP = "event loop (asyncio, uvloop)"
INTERP = "interpreter (C frames)"
SHARED = "aiohttp shared (http_writer, parsers, streams, payloads), yarl, multidict"
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::(?P<line>\d+))?\)$")

# (group, fragments); the first group with a fragment in a frame's `func (short path)` wins, so
# the specific groups come first (our output shaper before the rest of smg/pipeline/).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("our middleware", ("smg/api/middleware.py", "smg/app/gateway.py")),
    # gRPC mode: what runs per engine event and per request besides the transport
    ("our output shaper + detokenizer", ("smg/pipeline/output.py", "smg/pipeline/detokenize.py",
                                         "smg/pipeline/stop.py")),
    # decode_sync/_encode_now are one-line wrappers: their own time is the Rust call inside
    ("HF tokenizers (Rust) decode/encode", ("decode_sync (smg/pipeline/tokenizer.py",
                                           "_encode_now (smg/pipeline/tokenizer.py",
                                           "tokenizers/", "tokenizers.abi3", "tokenizers::")),
    ("template + tokenize (ours, jinja2, token cache)", ("smg/pipeline/chat_template.py",
        "smg/pipeline/tokenizer.py", "smg/pipeline/token_cache.py", "smg/actors/tokenizers.py",
        "jinja2/", "markupsafe/")),
    ("our gRPC adapter (backends/grpc*.py)", ("smg/pipeline/backends/grpc",)),
    ("grpc.aio (grpcio, cygrpc, gRPC core)", ("grpc/", "cygrpc", "grpc_core", "libgrpc")),
    ("protobuf (upb, generated messages)", ("protobuf", "smg_grpc_proto/", "upb_", "_upb",
                                            "PyUpb", "_message.abi3")),
    ("our handler (validate, relay)", ("smg/api/proxy_routes.py", "smg/api/requests.py",
                                       "smg/flow/admission.py", "smg/flow/inflight.py",
                                       "smg/flow/tokens.py", "smg/api/openai_routes.py",
                                       "smg/flow/relay.py", "smg/pipeline/sampling.py",
                                       "smg/pipeline/body_fields.py",
                                       "smg/pipeline/engine_types.py")),
    ("routing (runner, policy, snapshots)", ("smg/pipeline/", "smg/flow/runner.py", "smg/actors/",
                                          "smg/core/")),
    ("metrics", ("prometheus_client/", "smg/metrics.py")),
    ("logging", ("structlog/", "logging/", "smg/logs.py")),
    ("JSON", ("orjson", "json/")),
    ("aiohttp client", ("aiohttp/client", "aiohttp/connector.py", "aiohttp/tracing.py",
                        "aiohttp/cookiejar.py")),
    ("aiohttp writes (http_writer)", ("aiohttp/http_writer.py",)),
    ("aiohttp server", ("aiohttp/web",)),
    (SHARED, ("aiohttp/", "multidict/", "yarl/", "contextlib.py")),
    (LOOP, ("asyncio/", "uvloop/", "contextvars", "selectors.py")),
    # C frames, seen only with py-spy --native:
    ("GC (cyclic collector)", ("gc_collect", "gcmodule.c")),
    ("libc (send/recv syscalls, malloc)", ("libc.so", "libc-")),
    (LOOP, ("loop.c", "uv__", "libuv", "_asynciomodule.c", "handles/", ".pyx")),
    (INTERP, (".c)", ".h)", "libpython", ".so")),
)  # fmt: skip
OTHER = "other"
# Groups whose cost belongs to whoever called them: a leaf frame in one of these is attributed to
# the nearest caller in a specific group (asyncio.current_task called by our handler is ours).
GENERIC = frozenset({LOOP, SHARED, INTERP, OTHER})
TRUNK_SHARE = 0.99  # frames on at least this share of stacks (main, asyncio.run) are the trunk


@dataclass(frozen=True, slots=True)
class Frame:
    func: str
    file: str

    def label(self) -> str:
        return f"{self.func} ({short_path(self.file)})"


def short_path(path: str) -> str:
    """`.../site-packages/aiohttp/web_protocol.py` -> `aiohttp/web_protocol.py`."""
    for marker in ("site-packages/", "lib/python3"):
        i = path.rfind(marker)
        if i >= 0:
            rest = path[i + len(marker) :]
            return rest.split("/", 1)[1] if marker == "lib/python3" and "/" in rest else rest
    i = path.rfind("/smg/")
    return path[i + 1 :] if i >= 0 else path


def parse_frame(text: str) -> Frame:
    m = _FRAME.match(text.strip())
    if m is None:
        return Frame(text.strip(), "")
    return Frame(m["func"], m["file"])


def parse(lines: Iterable[str]) -> list[tuple[tuple[Frame, ...], int]]:
    """Collapsed-stack lines -> (frames root first, sample count); malformed lines are skipped."""
    out = []
    for line in lines:
        line = line.rstrip("\n")
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out.append((tuple(parse_frame(f) for f in stack.split(";")), int(count)))
    return out


def group_of(frame: Frame) -> str:
    if frame.func.startswith(("0x", "__libc_start", "_start")):
        return OTHER  # unsymbolised addresses, and the native root of every stack
    text = f"{frame.func} ({short_path(frame.file)})"
    for name, fragments in GROUPS:
        if any(f in text for f in fragments):
            return name
    return OTHER


def attribute(frames: tuple[Frame, ...]) -> str:
    """The group a sample's own time goes to: the leaf's, or for a generic leaf (asyncio, shared
    aiohttp helpers) the nearest caller's specific group; the event loop's when there is none."""
    for f in reversed(frames):
        g = group_of(f)
        if g not in GENERIC:
            return g
    return group_of(frames[-1])


# Leaf functions that block without using the CPU. py-spy leaves idle threads out of a Python-only
# profile but not (reliably) of a --native one, where they show up as these C frames.
WAITS = frozenset({
    "epoll_wait", "epoll_pwait", "poll", "ppoll", "select", "__select", "pselect", "pselect6",
    "pthread_cond_wait", "pthread_cond_timedwait", "__futex_abstimed_wait_common", "futex_wait",
    "sem_wait", "sem_timedwait", "nanosleep", "clock_nanosleep", "accept", "accept4",
    "PyThread_acquire_lock_timed", "take_gil",
})  # fmt: skip


def is_side_thread(frames: tuple[Frame, ...]) -> bool:
    """A sample from a thread started with `threading` (a pool worker, grpc's poller), not main."""
    return any(f.func.endswith("_bootstrap") and f.file.endswith("threading.py") for f in frames)


def is_idle(frames: tuple[Frame, ...]) -> bool:
    """Blocked in a wait: the last symbolised frame (unsymbolised libc addresses skipped) is one."""
    for f in reversed(frames):
        if not f.func.startswith("0x"):
            return f.func in WAITS
    return False


def filter_samples(
    samples: Iterable[tuple[tuple[Frame, ...], int]], *, main_only: bool, drop_idle: bool
) -> list[tuple[tuple[Frame, ...], int]]:
    return [
        (frames, n)
        for frames, n in samples
        if not (main_only and is_side_thread(frames)) and not (drop_idle and is_idle(frames))
    ]


@dataclass(frozen=True, slots=True)
class Summary:
    total: int
    own: Counter[Frame]
    cumulative: Counter[Frame]
    groups: Counter[str]  # by the leaf frame's own file
    groups_attributed: Counter[str]  # generic leaves charged to their nearest specific caller
    groups_cumulative: Counter[str]  # samples with the group anywhere on the stack


def summarise(samples: Iterable[tuple[tuple[Frame, ...], int]]) -> Summary:
    own: Counter[Frame] = Counter()
    cum: Counter[Frame] = Counter()
    groups: Counter[str] = Counter()
    groups_attr: Counter[str] = Counter()
    groups_cum: Counter[str] = Counter()
    total = 0
    for frames, n in samples:
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        groups[group_of(frames[-1])] += n
        groups_attr[attribute(frames)] += n
        for f in set(frames):  # recursion counts once
            cum[f] += n
        for g in {group_of(f) for f in frames}:
            groups_cum[g] += n
    return Summary(total, own, cum, groups, groups_attr, groups_cum)


def render(s: Summary, top: int = 15, scope: str = "idle excluded") -> str:
    if s.total == 0:
        return "no samples\n"
    pct = lambda n: f"{100 * n / s.total:.1f}"  # noqa: E731
    out = [
        f"{s.total} samples ({scope}). Own time: the leaf frame's, which includes C code it "
        "called unless the profile was taken with --native; attributed: a generic leaf (asyncio, "
        "shared aiohttp helpers, interpreter C frames) charged to its nearest specific caller.",
        "",
        "| group | own % (leaf file) | own % attributed | on stack % |",
        "|---|---:|---:|---:|",
    ]
    names = sorted(set(s.groups) | set(s.groups_attributed), key=lambda g: -s.groups_attributed[g])
    for name in names:
        out.append(
            f"| {name} | {pct(s.groups[name])} | {pct(s.groups_attributed[name])} | "
            f"{pct(s.groups_cumulative[name])} |"
        )
    out += ["", f"Top {top} by own time", "", "| own % | frame | group |", "|---:|---|---|"]
    for f, n in s.own.most_common(top):
        out.append(f"| {pct(n)} | `{f.label()}` | {group_of(f)} |")
    trunk = [f for f, n in s.cumulative.items() if n >= TRUNK_SHARE * s.total]
    branches = Counter({f: n for f, n in s.cumulative.items() if f not in trunk})
    out += ["", f"Top {top} by cumulative time (without the trunk: {len(trunk)} frames on "
            f">= {100 * TRUNK_SHARE:.0f}% of stacks, e.g. main, asyncio.run)", "",
            "| cum % | frame | group |", "|---:|---|---|"]  # fmt: skip
    for f, n in branches.most_common(top):
        out.append(f"| {pct(n)} | `{f.label()}` | {group_of(f)} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="py-spy --format raw output (collapsed stacks)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "--main-thread",
        action="store_true",
        help="only the main thread (drop threading.Thread stacks: pools, grpc poller)",
    )
    ap.add_argument(
        "--drop-idle",
        action="store_true",
        help="drop samples blocked in a wait (epoll_wait, futex...): for --native",
    )
    a = ap.parse_args()
    with open(a.file, encoding="utf-8", errors="replace") as f:
        samples = filter_samples(parse(f), main_only=a.main_thread, drop_idle=a.drop_idle)
    scope = ", ".join(["main thread only"] * a.main_thread + ["waits dropped"] * a.drop_idle)
    print(render(summarise(samples), a.top, scope or "idle excluded by py-spy"), end="")


if __name__ == "__main__":
    main()
