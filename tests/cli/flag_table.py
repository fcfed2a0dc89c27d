"""Print the Rust gateway's launch flags as a markdown table: served by smg, or not yet (and by
which issue). For a closing note: `.venv/bin/python tests/cli/flag_table.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli.test_rust_flags import NOT_YET_FLAGS, OPTIONS


def flag_table() -> list[str]:
    rows = ["| flag (aliases) | smg |", "|---|---|"]
    for names, _ in sorted(OPTIONS):
        row = NOT_YET_FLAGS.get(names[0])
        if row is None:
            state = "served"
        else:
            state = f"not yet (issue {row.issue})" if row.issue else "not yet (no issue)"
        rows.append(f"| `{'`, `'.join(names)}` | {state} |")
    served = sum(1 for names, _ in OPTIONS if names[0] not in NOT_YET_FLAGS)
    rows.append(f"\n{served} of {len(OPTIONS)} served, {len(OPTIONS) - served} not yet.")
    return rows


if __name__ == "__main__":
    print("\n".join(flag_table()))
