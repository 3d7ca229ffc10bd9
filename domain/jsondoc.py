"""JSON documents from outside (request bodies, transcripts, export lines): parsed with bounds.

``json.loads`` recurses, so a document nested a thousand levels deep raises RecursionError
instead of a clean error; every document this service reads is shallow, so anything nested
more than ``MAX_DEPTH`` levels is refused as malformed before any code walks it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 32


class MalformedJson(ValueError):
    """Not JSON, not UTF-8, or nested too deeply: the reason is one line."""


def depth(value: Any, stop_after: int = MAX_DEPTH) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion limit to hit).

    Counting stops once it passes ``stop_after``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > stop_after:
            break
        stack.extend((child, level + 1) for child in children)
    return deepest


def check_depth(value: Any, limit: int = MAX_DEPTH) -> Any:
    """``value`` itself, or MalformedJson when it nests more than ``limit`` levels."""
    if depth(value, limit) > limit:
        raise MalformedJson(f"the document is nested more than {limit} levels deep")
    return value


def loads(data: bytes | str, limit: int = MAX_DEPTH) -> Any:
    """Parse UTF-8 JSON text (bytes must be UTF-8: no UTF-16 guessing) with a depth bound."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedJson("the document is not UTF-8") from None
    try:
        value = json.loads(
            data, parse_int=_integer, parse_float=_finite, parse_constant=_no_constant
        )
    except RecursionError:
        raise MalformedJson(f"the document is nested more than {limit} levels deep") from None
    except ValueError as exc:
        raise MalformedJson(f"not JSON: {exc}") from None
    return check_text(check_depth(value, limit))


# The integers the API's parser (orjson) reads as integers; beyond them it reads a number as a
# float, as these do, so that a transcript or an export means the same to the API and the CLI
# (a seat of 10**22 is "not an integer" to both).
WIDEST_INT = (-(2**63), 2**64 - 1)


def _integer(text: str) -> int | float:
    if len(text) < 19:  # (every such number is in range)
        return int(text)
    number = int(text)
    low, high = WIDEST_INT
    return number if low <= number <= high else float(number)


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return number


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def check_text(value: Any) -> Any:
    """``value`` itself, or MalformedJson when a string in it (a key or a value) holds a lone
    UTF-16 surrogate: ``json.loads`` reads ``"\\ud800"`` into a str that is no Unicode text, and
    that no later step can encode (a hash, a store, an answer). Call after ``check_depth``."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            strings: Any = (item,)
        elif isinstance(item, Mapping):
            strings = item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
            continue
        else:
            continue
        for text in strings:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise MalformedJson(
                    "a string holds a lone UTF-16 surrogate (such as \\ud800): not Unicode text"
                ) from None
    return value
