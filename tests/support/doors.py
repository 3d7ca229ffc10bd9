"""The scan of a module's imports that the public-doors tests share."""

from __future__ import annotations

import ast


def library_names(tree: ast.Module, libraries: tuple[str, ...]) -> dict[str, str]:
    """The names a module binds to ``libraries``' modules and objects: name -> dotted origin
    (tests/test_public_doors.py and tests/test_store_public_doors.py)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in libraries:
                    names[(alias.asname or alias.name).split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in libraries:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names
