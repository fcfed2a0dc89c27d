"""One Prometheus text exposition from several processes' (pure).

Each process's text is kept sample for sample, with a `process="i"` label added, and the
samples of one metric family are grouped under one `# HELP` / `# TYPE` (the text format wants a
family's samples together, and each named once), a run per sample name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

LABEL = "process"


@dataclass(slots=True)
class _Family:
    help: str | None = None
    type: str | None = None
    samples: list[str] = field(default_factory=list)


def _family_of(sample: str, families: dict[str, _Family], current: str | None) -> str:
    """A sample belongs to the family described last (`x_total`, `x_created` under `x_total`,
    as prometheus_client writes them), else to its own name."""
    if current is not None:
        return current
    name = _sample_name(sample)
    families.setdefault(name, _Family())
    return name


def _sample_name(sample: str) -> str:
    end = min((i for i in (sample.find("{"), sample.find(" ")) if i >= 0), default=len(sample))
    return sample[:end]


def labelled(sample: str, value: str) -> str:
    """`name{a="b"} 1` -> `name{process="v",a="b"} 1`; `name 1` -> `name{process="v"} 1`."""
    brace, space = sample.find("{"), sample.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        rest = sample[brace + 1 :]
        sep = "" if rest.startswith("}") else ","
        return f'{sample[:brace]}{{{LABEL}="{value}"{sep}{rest}'
    if space < 0:
        return sample
    return f'{sample[:space]}{{{LABEL}="{value}"}}{sample[space:]}'


def merge(texts: Sequence[tuple[str, str]]) -> str:
    """`texts`: (process label value, exposition) pairs; the merged exposition."""
    families: dict[str, _Family] = {}
    for value, text in texts:
        current: str | None = None
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                kind, _, rest = line[2:].partition(" ")
                name, _, doc = rest.partition(" ")
                fam = families.setdefault(name, _Family())
                if kind == "HELP":
                    fam.help = fam.help if fam.help is not None else doc
                else:
                    fam.type = fam.type if fam.type is not None else doc
                current = name
                continue
            if line.startswith("#"):
                continue
            current = _family_of(line, families, current)
            families[current].samples.append(labelled(line, value))
    out: list[str] = []
    for name, fam in families.items():
        if fam.help is not None:
            out.append(f"# HELP {name} {fam.help}")
        if fam.type is not None:
            out.append(f"# TYPE {name} {fam.type}")
        # one run per sample name (`x_bucket`s, then `x_count`s...), each process's in order
        out.extend(sorted(fam.samples, key=_sample_name))
    return "\n".join(out) + "\n"
