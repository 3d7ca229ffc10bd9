"""openapi.yaml is clean under both linters ``make lint`` runs, Redocly (recommended rules,
redocly.yaml) and Spectral (``spectral:oas``, .spectral.yaml, warnings fail too), at the
versions the Makefile pins, through npx. CI runs only ``make test``: here the suite runs them.

Node.js and npm are needed (the npm registry, or npm's cache, for the first run): without npx
these tests fail, saying so; they never skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pinned(name: str) -> str:
    """The package@version the Makefile pins as ``NAME := …``."""
    found = re.search(rf"^{name} := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found, f"the Makefile pins no {name}"
    return found.group(1)


def npx(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("npx")
    assert path, "npx (Node.js and npm) is needed to lint openapi.yaml: install Node.js"
    return subprocess.run(
        [path, "--yes", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(
    ("linter", "args"),
    [
        ("REDOCLY", ["lint", "openapi.yaml", "--format=stylish"]),
        (
            "SPECTRAL",
            [
                "lint",
                "openapi.yaml",
                "--ruleset",
                ".spectral.yaml",
                "--fail-severity=warn",
                "--format=text",
            ],
        ),
    ],
)
def test_the_document_is_clean_under_the_linter(linter: str, args: list[str]) -> None:
    result = npx(pinned(linter), *args)
    assert result.returncode == 0, f"{linter} found problems:\n{result.stdout}\n{result.stderr}"
