"""The store's and the server's tests against the newest release of every bounded library.

pyproject.toml bounds each library below its next major (or minor) release, and a fresh install
takes the newest release inside those bounds: this check makes that install in a venv of its
own, from the package registry, and runs the tests that would see a library change under the
service (the store, its fast paths, outages, the server's edges, the library hooks). Run it as
``make newest``; .ci/run runs it after ``make test``. Without the registry it fails: pip cannot
install, and nothing is skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
TESTS = (
    "tests/test_fast_paths.py",
    "tests/test_outages.py",
    "tests/test_log_reader.py",
    "tests/test_views.py",
    "tests/test_server_edges.py",
    "tests/test_public_doors.py",
    "tests/test_store_public_doors.py",
)
UPPER = ("<", "<=", "==", "~=")


def bounded(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """The dependencies that pyproject.toml bounds from above, as it says them."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = [Requirement(line) for line in project["dependencies"]]
    return [r for r in requirements if any(s.operator in UPPER for s in r.specifier)]


def run(*command: str | Path, **kwargs: object) -> None:
    print("+", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], check=True, **kwargs)  # type: ignore[call-overload]


def check(venv: Path, pytest_args: list[str]) -> None:
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "venv", venv)
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    libraries = bounded()
    # The bounded libraries named again, with their bounds: each is upgraded to its newest
    # release inside them, whatever pip's cache holds (--upgrade-strategy eager: theirs too).
    run(
        python, "-m", "pip", "install", "--quiet", "--upgrade", "--upgrade-strategy", "eager",
        "-e", f"{ROOT}[dev]", *(str(r) for r in libraries),
    )  # fmt: skip
    versions = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout
    installed = dict(line.split("==", 1) for line in versions.splitlines() if "==" in line)
    names = {name.lower().replace("_", "-"): version for name, version in installed.items()}
    print("newest releases within pyproject.toml's bounds:")
    for requirement in libraries:
        found = names.get(requirement.name.lower().replace("_", "-"), "not installed")
        print(f"  {requirement.name} {found}  ({requirement.specifier})")
    missing = [test for test in TESTS if not (ROOT / test).is_file()]
    if missing:
        raise SystemExit(f"tests/newest.py names tests that are gone: {', '.join(missing)}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run(python, "-m", "pytest", "-q", "-n", "auto", *TESTS, *pytest_args, cwd=ROOT, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keep", action="store_true", help="keep the venv (its path is printed)")
    args, pytest_args = parser.parse_known_args()  # the rest is pytest's (make's PYTEST_ARGS)
    venv = Path(tempfile.mkdtemp(prefix="cantstop-newest-")) / "venv"
    try:
        check(venv, pytest_args)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"the newest releases' check failed: {exc}") from None
    finally:
        if args.keep:
            print(f"the venv is kept at {venv}")
        else:
            shutil.rmtree(venv.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
