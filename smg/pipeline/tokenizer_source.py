"""Where a tokenizer named on the command line or by a worker lives on this machine.

A name is a local folder (or its `tokenizer.json`; a folder must hold one), else a Hugging Face
id (`org/name`) looked up in the local Hugging Face cache, offline: `$HF_HUB_CACHE`, else
`$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`
(huggingface_hub's order). The cache holds `models--org--name/refs/main` (the revision) and
`snapshots/<revision>/` (the files). Nothing is ever downloaded: an id not in the cache is
`TokenizerNotFound` naming the id and the folder looked in. A local path that does not exist is
`NoSuchPath`: as in the Rust gateway, such a model is left to its engine's tokenizer where one
can be fetched. File reads only: no sockets, no clock; the environ is an argument.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

# An id as the Hub spells it: `name` or `org/name`, letters, digits, `-`, `_`, `.`.
_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_TOKENIZER_FILE = "tokenizer.json"


class TokenizerNotFound(LookupError):
    """A tokenizer name that is neither a local path nor an id in the local Hugging Face cache."""


class NoSuchPath(TokenizerNotFound):
    """A name that is a local path (not a Hugging Face id) and does not exist: the Rust gateway
    leaves such a model to the engine's own tokenizer (GetTokenizer)."""


def hf_hub_cache(env: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache folder the environment names (huggingface_hub's order)."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def is_hf_id(name: str) -> bool:
    return _HF_ID.fullmatch(name) is not None and ".." not in name


def resolve_tokenizer_dir(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The folder holding `name`'s `tokenizer.json`: `name` itself (a folder, or the file's
    folder), else its snapshot in the local Hugging Face cache. `TokenizerNotFound` otherwise."""
    env = os.environ if env is None else env
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / _TOKENIZER_FILE).is_file():
            raise TokenizerNotFound(f"tokenizer folder {name!r} has no {_TOKENIZER_FILE}")
        return path
    if path.is_file():
        return path.parent
    if not is_hf_id(name):
        raise NoSuchPath(f"tokenizer {name!r}: no such file or folder")
    return hf_snapshot(name, hf_hub_cache(env))


def hf_snapshot(model_id: str, cache: Path) -> Path:
    """The cached snapshot of `model_id` that holds its tokenizer: the revision `refs/main`
    names, else the newest snapshot with a `tokenizer.json`."""
    repo = cache / ("models--" + model_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    snapshots = repo / "snapshots"
    if ref.is_file():
        folder = snapshots / ref.read_text(encoding="utf-8").strip()
        if (folder / _TOKENIZER_FILE).is_file():
            return folder
    candidates = (
        [d for d in snapshots.iterdir() if (d / _TOKENIZER_FILE).is_file()]
        if snapshots.is_dir()
        else []
    )
    if candidates:
        return max(candidates, key=lambda d: d.stat().st_mtime)
    raise TokenizerNotFound(
        f"tokenizer {model_id!r} is not a local path and not in the Hugging Face cache "
        f"(looked in {repo}); smg never downloads: put it in the cache first "
        f"(`huggingface-cli download {model_id}` with the same HF_HOME) or give a local folder"
    )


def worker_tokenizer_problem(
    labels: Mapping[str, str], env: Mapping[str, str] | None = None
) -> str | None:
    """Why a worker's own tokenizer labels cannot be served (`tokenizer_path`, else
    `model_path`: resolvable as above; `chat_template`: a file), or None when they can."""
    name = labels.get("tokenizer_path") or labels.get("model_path")
    if name:
        try:
            resolve_tokenizer_dir(name, env)
        except NoSuchPath:
            pass  # left to the engine's tokenizer
        except TokenizerNotFound as exc:
            return str(exc)
    template = labels.get("chat_template")
    if template and not Path(template).expanduser().is_file():
        return f"chat template {template!r}: no such file"
    return None
