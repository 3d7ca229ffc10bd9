"""What the store's failures are, as the application and the HTTP layer see them."""

from __future__ import annotations

import sqlite3

import psycopg

from service.errors import ApplicationError


class StoreUnavailable(ApplicationError):
    """The event store cannot be reached (or is busy beyond its lock timeout): try again soon."""

    code = "store_unavailable"
    retry_after = 2


class CorruptGame(ApplicationError):
    """A game whose stored events cannot be read: reported with the first bad version."""

    code = "corrupt_game"


class WritersQueued(sqlite3.OperationalError):
    """This process's writers waited for one another past SQLite's lock timeout."""


class NoAnswer(psycopg.OperationalError):
    """The database did not answer within the deadline. The statement's outcome is unknown
    (a write may still commit); the connection was closed; ``guarded`` answers 503 without
    trying again at once."""
