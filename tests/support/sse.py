"""Server-sent events as the tests read them: one frame's fields, its comments kept aside."""

from __future__ import annotations


def frame_fields(frame: str, comments: list[str]) -> dict[str, str]:
    """The ``name: value`` fields of one frame (the text between two blank lines); its comment
    lines (``:`` first) are appended to ``comments``."""
    fields: dict[str, str] = {}
    for line in frame.splitlines():
        if line.startswith(":"):
            comments.append(line)
        elif line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
    return fields
