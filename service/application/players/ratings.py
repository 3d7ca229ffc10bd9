"""Ratings: OpenSkill's Plackett–Luce model with its default parameters (the ``openskill``
library), one rating per account per pool (contract 1.2, "Ratings").

A pure function of the rated games in the order they finished: ``Ratings.apply`` takes one
finished game (its pool, each seat's account, each seat's place from ``domain.ratings.ranks``)
and moves the ratings of its seats, once. The server's ratings and ``cantstop ratings`` (offline,
from an export) both fold games through it, so they agree to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from openskill.models import PlackettLuce

MODEL = PlackettLuce()  # its default parameters: mu 25, sigma 25/3, beta 25/6, tau 25/300
PROVISIONAL_BELOW = 10  # games in the pool


@dataclass(frozen=True)
class Rating:
    mu: float
    sigma: float
    games: int = 0

    @property
    def rating(self) -> float:
        """What leaderboards rank by: a conservative estimate, mu − 3·sigma."""
        return self.mu - 3 * self.sigma

    @property
    def provisional(self) -> bool:
        return self.games < PROVISIONAL_BELOW


def initial() -> Rating:
    fresh = MODEL.rating()
    return Rating(fresh.mu, fresh.sigma, 0)


def rate(before: Sequence[Rating], places: Sequence[int]) -> list[Rating]:
    """The seats' ratings after one game in which seat ``i`` finished at ``places[i]`` (0 is
    first; equal places are ties)."""
    teams = [[MODEL.create_rating([r.mu, r.sigma])] for r in before]
    after = MODEL.rate(teams, ranks=[float(p) for p in places])
    return [
        Rating(team[0].mu, team[0].sigma, r.games + 1)
        for team, r in zip(after, before, strict=True)
    ]


@dataclass(frozen=True)
class RatedGame:
    """A finished rated game as the ratings need it."""

    game_id: str
    pool: str
    accounts: Sequence[str]  # each seat's account handle
    places: Sequence[int] | None  # None: the game rates nobody (abandoned)


@dataclass
class Ratings:
    """Every account's rating in every pool, folded from rated games in the order they
    finished."""

    by_pool: dict[str, dict[str, Rating]] = field(default_factory=dict)

    def get(self, pool: str, account: str) -> Rating:
        return self.by_pool.get(pool, {}).get(account.lower()) or initial()

    def apply(self, game: RatedGame) -> dict[str, Rating]:
        """Move the ratings of the game's seats (nothing for an abandoned game): each seat's
        account and its rating after."""
        if game.places is None:
            return {}
        before = [self.get(game.pool, account) for account in game.accounts]
        after = rate(before, game.places)
        pool = self.by_pool.setdefault(game.pool, {})
        for account, rating in zip(game.accounts, after, strict=True):
            pool[account.lower()] = rating
        return dict(zip(game.accounts, after, strict=True))

    @classmethod
    def of(cls, games: Iterable[RatedGame]) -> Ratings:
        ratings = cls()
        for game in games:
            ratings.apply(game)
        return ratings


# ------------------------------------------------------------------------------- the ledger
def ranking_of(accounts: Sequence[str], places: Sequence[int]) -> list[list[str]]:
    """A game's order as the ledger writes it: best first, tied handles in one list (in seat
    order)."""
    return [
        [a for a, p in zip(accounts, places, strict=True) if p == place]
        for place in sorted(set(places))
    ]


def places_of(ranking: Sequence[Sequence[str]]) -> tuple[list[str], list[int]]:
    """The seats of a ledger ranking, best first, and their places (0, 1, 1, 3: each place
    counts the handles ranked before it), as the fold hands them to the model."""
    accounts: list[str] = []
    places: list[int] = []
    for group in ranking:
        place = len(accounts)
        for handle in group:
            accounts.append(handle)
            places.append(place)
    return accounts, places


def skipped(accounts: Iterable[str], excluded: Iterable[str]) -> bool:
    """Whether a result names an excluded account: then it moves no rating, in its pool."""
    return not {a.lower() for a in accounts}.isdisjoint(e.lower() for e in excluded)


@dataclass
class LedgerFold:
    """The ledger (``GET /v1/ratings/ledger``) folded in ``seq`` order: what ``cantstop
    ratings LEDGER`` prints. The server's view applies each entry through the same
    ``places_of``, ``skipped`` and ``rate``, so both agree to the last bit."""

    ratings: Ratings = field(default_factory=Ratings)
    excluded: set[str] = field(default_factory=set)  # lower-case handles
    handles: dict[str, str] = field(default_factory=dict)  # lower-case → as written
    results: int = 0  # results that moved ratings
    skips: int = 0  # results passed over: an excluded account sat in them
    last_seq: int = 0

    def apply(self, entry: object) -> None:
        """One ledger line; ValueError for one out of order or not of the ledger's shape."""
        if not isinstance(entry, dict):
            raise ValueError("not a JSON object")
        seq = entry.get("seq")
        if not isinstance(seq, int) or seq <= self.last_seq:
            raise ValueError(f"seq {seq!r} is not after {self.last_seq}")
        self.last_seq = seq
        kind = entry.get("type")
        if kind in ("exclude", "reinstate"):
            handle = entry.get("handle")
            if not isinstance(handle, str):
                raise ValueError(f"entry {seq}: no handle")
            if kind == "exclude":
                self.excluded.add(handle.lower())
            else:
                self.excluded.discard(handle.lower())
            return
        ranking, pool = entry.get("ranking"), entry.get("pool")
        if kind != "result" or not isinstance(pool, str) or not _is_ranking(ranking):
            raise ValueError(f"entry {seq}: not a result, an exclusion or a reinstatement")
        accounts, places = places_of(ranking)  # type: ignore[arg-type]
        for handle in accounts:
            self.handles.setdefault(handle.lower(), handle)
        if skipped(accounts, self.excluded):
            self.skips += 1
            return
        self.results += 1
        self.ratings.apply(RatedGame(str(entry.get("game_id")), pool, accounts, places))


def _is_ranking(value: object) -> bool:
    """Groups of handles, two handles or more in all (a rated game has two seats or more)."""
    return (
        isinstance(value, list)
        and all(
            isinstance(group, list) and group and all(isinstance(h, str) for h in group)
            for group in value
        )
        and sum(len(group) for group in value) >= 2
    )
