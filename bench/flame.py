#!/usr/bin/env python3
"""Draw a flame graph (SVG) from collapsed stacks (`py-spy record --format raw`).

Each input line is `frame;frame;...;leaf COUNT`. Frames are merged across line numbers, as
bench/stacks.py does, so one function is one box however many of its lines were sampled. Boxes
narrower than `--min-width` pixels are left out (their time still counts in their parent). Every
box has a tooltip with its frame and share of the samples; colours only tell groups apart
(ours: smg/, aiohttp, asyncio, the rest).

    python bench/flame.py bench/results/profile-http-chat-c64-<time>.txt -o flame.svg

Pure apart from reading and writing the files: `tree` and `svg` take and return data.
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path
from typing import Any

_LINE = re.compile(r":\d+\)$")
WIDTH, ROW = 1600, 17


def _frame(raw: str) -> str:
    return _LINE.sub(")", raw)  # `func (file:line)` -> `func (file)`


def tree(lines: list[str]) -> dict[str, Any]:
    """Nested {"n": samples, "kids": {frame: node}} from collapsed-stack lines."""
    root: dict[str, Any] = {"n": 0, "kids": {}}
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        node = root
        node["n"] += n
        for raw in stack.split(";"):
            node = node["kids"].setdefault(_frame(raw), {"n": 0, "kids": {}})
            node["n"] += n
    return root


def _colour(frame: str) -> str:
    if "smg/" in frame:
        return "#e8833a"
    if "aiohttp/" in frame:
        return "#5b9bd5"
    if "asyncio/" in frame or "uvloop" in frame:
        return "#9e9e9e"
    return "#d9b44a"


def svg(root: dict[str, Any], title: str, min_width: float = 0.3) -> str:
    total = root["n"] or 1
    scale = WIDTH / total
    boxes: list[str] = []
    depth_max = 0

    def walk(node: dict[str, Any], x: float, depth: int) -> None:
        nonlocal depth_max
        for frame, kid in sorted(node["kids"].items()):
            w = kid["n"] * scale
            if w >= min_width:
                depth_max = max(depth_max, depth)
                y = 30 + depth * ROW
                share = 100 * kid["n"] / total
                tip = html.escape(f"{frame}: {kid['n']} samples, {share:.1f} %")
                label = html.escape(frame[: int(w / 7)]) if w > 35 else ""
                boxes.append(
                    f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                    f'height="{ROW - 1}" fill="{_colour(frame)}"/>'
                    f'<text x="{x + 3:.1f}" y="{y + 12}">{label}</text></g>'
                )
                walk(kid, x, depth + 1)
            x += w

    walk(root, 0.0, 0)
    height = 40 + (depth_max + 1) * ROW
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="monospace" font-size="11">'
        f'<text x="4" y="18" font-size="14">{html.escape(title)} ({total} samples; '
        f"orange: smg, blue: aiohttp, grey: asyncio)</text>" + "".join(boxes) + "</svg>\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stacks", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--title", default="smg")
    ap.add_argument("--min-width", type=float, default=0.3)
    args = ap.parse_args()
    root = tree(args.stacks.read_text().splitlines())
    args.out.write_text(svg(root, args.title, args.min_width))


if __name__ == "__main__":
    main()
