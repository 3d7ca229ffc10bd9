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
