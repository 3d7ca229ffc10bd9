"""Every private part of a library that the service overrides, replaces or reaches into, with why.

Pure data, importing nothing (the bottom of the service). tests/test_library_hooks.py checks each
hook against the installed library: the attribute exists, each callable still has the signature
recorded here, the functions whose behaviour the service relies on still have the source recorded
here (a SHA-256 of ``inspect.getsource``), and that source still says what ``contains`` quotes.
An upgrade that moves or edits any of them fails that test, naming the hook, the version
installed, where the service uses it and what to re-check. When it does: re-read the library's
code, check the use still holds (and run tests/test_fast_paths.py for the fast paths), then record
the new values the failure prints. pyproject.toml gives every library named here an upper bound.

A hook's ``path`` is the library's attribute, dotted from its module; ``instance`` marks one
that only instances have (set in ``__init__``: a check quotes the assignment). ``used_in``
names ``module:qualname`` places of the service. ``proven_by`` names the tests showing that a
fast path stores exactly what the library's own path stores.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """What must still hold of one library object (``target``, dotted from its module)."""

    target: str
    signature: str | None = None  # str(inspect.signature(target)) as recorded
    sha256: str | None = None  # of inspect.getsource(target), as recorded
    contains: tuple[str, ...] = ()  # text its source must still contain


@dataclass(frozen=True)
class Hook:
    path: str
    distribution: str  # the package that ships it (as pyproject.toml names it)
    used_in: tuple[str, ...]
    why: str
    recheck: str
    checks: tuple[Check, ...]
    instance: bool = False
    proven_by: tuple[str, ...] = ()


PG = "service.persistence.postgres"
SQ = "service.persistence.sqlite"
GU = "service.gunicorn_settings"
FAST = "tests/test_fast_paths.py"

HOOKS: tuple[Hook, ...] = (
    # --------------------------------------------------------- eventsourcing: the application
    Hook(
        path="eventsourcing.application.Application.save",
        distribution="eventsourcing",
        used_in=("service.persistence.guard:_plain",),
        why=(
            "The fast insert paths take a call with only tracking=None, as save passes it (only "
            "a process application tracks): a game's creation must not take the library's "
            "slower path."
        ),
        recheck="that save (through _record and the event store) still passes tracking=None",
        checks=(
            Check(
                "eventsourcing.application.Application._record",
                sha256="104c6186b29d50595198443b697de23b0dab4344c50d4dca54688b32fce52340",
                contains=("tracking=processing_event.tracking",),
            ),
        ),
    ),
)
