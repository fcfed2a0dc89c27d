"""A local Hugging Face cache laid out as huggingface_hub leaves it, for tests of the offline
tokenizer lookup: `<hf_home>/hub/models--org--name/refs/main` naming a revision, and
`snapshots/<revision>/` holding the files (symlinks into `blobs/` in a real cache; links to the
source files here)."""

from __future__ import annotations

from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"


def fake_hf_cache(
    hf_home: Path, model_id: str, files: Path, *, revision: str = REVISION, ref: bool = True
) -> Path:
    """Put `files`' tokenizer files into `hf_home`'s cache as `model_id`; the snapshot folder."""
    repo = hf_home / "hub" / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for src in files.iterdir():
        if src.is_file() and (src.suffix in (".json", ".txt", ".jinja")):
            (snapshot / src.name).symlink_to(src)
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
    return snapshot
