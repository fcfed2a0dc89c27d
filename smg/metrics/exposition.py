"""Merging Prometheus text expositions from several workers into one (`GET /engine_metrics`).

Pure text in, text out. Each worker's samples get a `worker_addr` label (the Rust gateway's
name for it); a family that several workers expose is written once, its `# HELP`/`# TYPE` lines
first and every worker's samples after them, as the text format requires. A colon in a name
becomes `_` (vLLM names its series `vllm:...`; the Rust gateway's parser rejects colons and
renames them the same way). A line that is not a sample or a HELP/TYPE comment is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|Inf|inf|NaN|nan)"
# name, {labels}, " value [timestamp]"
_SAMPLE = re.compile(rf"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{{.*\}})?(\s+{_NUMBER}(?:\s+-?\d+)?)$")
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_info")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Family:
    __slots__ = ("help", "samples", "type")

    def __init__(self) -> None:
        self.help: str | None = None
        self.type: str | None = None
        self.samples: list[str] = []


def merge(packs: Iterable[tuple[str, str]]) -> str:
    """One exposition from (worker address, its exposition text) pairs."""
    families: dict[str, _Family] = {}
    for addr, text in packs:
        label = f'worker_addr="{_escape(addr)}"'
        typed: set[str] = set()  # the families this worker declared (a sample's family)
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                parts = line.split(None, 3)
                if len(parts) < 3:
                    continue
                name = parts[2].replace(":", "_")
                fam = families.setdefault(name, _Family())
                rest = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP" and fam.help is None:
                    fam.help = rest
                elif parts[1] == "TYPE" and fam.type is None:
                    fam.type = rest
                typed.add(name)
                continue
            m = _SAMPLE.match(line)
            if m is None:
                continue
            name = m[1].replace(":", "_")
            labels = m[2][1:-1].strip().rstrip(",") if m[2] else ""
            merged = f"{labels},{label}" if labels else label
            families.setdefault(_family_of(name, typed), _Family()).samples.append(
                f"{name}{{{merged}}}{m[3]}"
            )
    out: list[str] = []
    for name, fam in families.items():
        if not fam.samples:
            continue
        if fam.help is not None:
            out.append(f"# HELP {name} {fam.help}")
        if fam.type is not None:
            out.append(f"# TYPE {name} {fam.type}")
        out.extend(fam.samples)
    return "\n".join(out) + "\n" if out else ""


def _family_of(sample: str, typed: set[str]) -> str:
    """The declared family a sample belongs to (`x_bucket` -> `x`), else its own name."""
    if sample in typed:
        return sample
    for suffix in _SUFFIXES:
        base = sample.removesuffix(suffix)
        if base != sample and base in typed:
            return base
    return sample


def status_family(results: Iterable[tuple[str, bool]]) -> str:
    """`smg_engine_metrics_scrape_success{worker_addr}`: 1 when the worker's scrape was merged,
    0 when it failed (the failure is reported here, never raised)."""
    lines = [
        "# HELP smg_engine_metrics_scrape_success Whether the worker's /metrics was scraped",
        "# TYPE smg_engine_metrics_scrape_success gauge",
    ]
    for addr, ok in results:
        lines.append(
            f'smg_engine_metrics_scrape_success{{worker_addr="{_escape(addr)}"}} {int(ok)}'
        )
    return "\n".join(lines) + "\n"
