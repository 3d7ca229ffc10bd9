"""docs/tournaments.md names, beside each promise, the test that holds it: each must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "tournaments.md").read_text(encoding="utf-8")
NAMED = sorted(set(re.findall(r"(tests/[\w/]+\.py)::(\w+)", DOC)))


def test_every_test_this_page_names_exists() -> None:
    assert len(NAMED) >= 30  # the page names its tests (the pattern still finds them)
    missing = [
        f"{path}::{name}"
        for path, name in NAMED
        if not (ROOT / path).is_file()
        or not re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M)
    ]
    assert missing == []
