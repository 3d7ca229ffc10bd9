"""Ratings (contract 1.2): the order of a finished game, and OpenSkill's Plackett–Luce model
with its defaults, checked against the ``openskill`` library's own numbers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from openskill.models import PlackettLuce

from domain.ratings import Finish, pool, ranks
from service.application.players.ratings import (
    PROVISIONAL_BELOW,
    RatedGame,
    Rating,
    Ratings,
    initial,
)


def test_the_winner_first_then_columns_then_heights_and_ties_stay_tied() -> None:
    finish = Finish(winner=2, claimed=[1, 2, 3, 1], heights=[9, 4, 20, 9], resigned=[])
    assert ranks(finish) == [2, 1, 0, 2]  # seats 0 and 3 tie (1 column, height 9)


def test_resigned_players_rank_below_everyone_earlier_resignations_lower() -> None:
    finish = Finish(winner=1, claimed=[3, 3, 0, 0], heights=[5, 5, 0, 0], resigned=[0, 3])
    # Seat 0 claimed three columns but resigned first: last. Seat 3 resigned after it.
    assert ranks(finish) == [3, 0, 1, 2]


def test_an_abandoned_game_rates_nobody() -> None:
    finish = Finish(winner=None, claimed=[0, 0], heights=[3, 1], resigned=[], abandoned=True)
    assert ranks(finish) is None
    ratings = Ratings()
    assert ratings.apply(RatedGame("g", "2p-x", ["ann", "bob"], None)) == {}
    assert ratings.by_pool == {}


@given(
    st.integers(2, 8).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
            st.lists(st.integers(0, 40), min_size=n, max_size=n),
            st.permutations(range(n)).flatmap(lambda p: st.integers(0, n - 1).map(lambda k: p[:k])),
            st.integers(0, n - 1),
        )
    )
)
def test_places_are_a_ranking_that_keeps_the_contracts_order(
    case: tuple[int, list[int], list[int], list[int], int],
) -> None:
    n, claimed, heights, resigned, winner = case
    if winner in resigned:
        resigned = [s for s in resigned if s != winner]
    places = ranks(Finish(winner, claimed, heights, resigned))
    assert places is not None and len(places) == n
    assert places[winner] == 0 and min(places) == 0
    stayed = [s for s in range(n) if s not in resigned]
    for a in stayed:
        for b in resigned:
            assert places[a] < places[b]  # every resigned player below every other
    for i, a in enumerate(resigned):
        for b in resigned[i + 1 :]:
            assert places[a] > places[b]  # the earlier resigned, the lower
    for a in stayed:
        for b in stayed:
            if winner not in (a, b) and (claimed[a], heights[a]) == (claimed[b], heights[b]):
                assert places[a] == places[b]  # equal stays tied


def openskill_after(before: list[Rating], places: list[int]) -> list[tuple[float, float]]:
    """The library's own numbers, computed independently of service.application.players.ratings."""
    model = PlackettLuce()
    teams = [[model.rating(mu=r.mu, sigma=r.sigma)] for r in before]
    return [(t[0].mu, t[0].sigma) for t in model.rate(teams, ranks=[float(p) for p in places])]


def test_two_three_and_four_players_match_openskill_exactly() -> None:
    cases = [
        (["ann", "bob"], Finish(1, [1, 3], [6, 11], [])),
        (["ann", "bob", "cy"], Finish(0, [3, 1, 1], [12, 7, 7], [])),  # bob and cy tie
        (["ann", "bob", "cy", "dee"], Finish(3, [2, 0, 1, 3], [10, 0, 4, 13], [1])),
    ]
    ratings = Ratings()
    for accounts, finish in cases:
        places = ranks(finish)
        assert places is not None
        pool_id = pool({"dice_faces": 6}, len(accounts))
        before = [ratings.get(pool_id, a) for a in accounts]
        after = ratings.apply(RatedGame("g", pool_id, accounts, places))
        expected = openskill_after(before, places)
        assert [(after[a].mu, after[a].sigma) for a in accounts] == expected  # to the last bit
        assert all(after[a].games == 1 for a in accounts)
    # Ann played all three pools' first game: her ratings in each are separate.
    assert len({pool({"dice_faces": 6}, n) for n in (2, 3, 4)}) == 3


def test_a_rating_folds_games_in_the_order_they_finished() -> None:
    pool_id = pool({"dice_faces": 6}, 2)
    games = [RatedGame(str(i), pool_id, ["ann", "bob"], [i % 2, 1 - i % 2]) for i in range(12)]
    ratings = Ratings.of(games)
    ann = ratings.get(pool_id, "Ann")  # handles are the same whatever their case
    assert ann.games == 12 and not ann.provisional
    assert Ratings.of(games[: PROVISIONAL_BELOW - 1]).get(pool_id, "ann").provisional
    mu, sigma = initial().mu, initial().sigma
    expected = [(mu, sigma), (mu, sigma)]
    for game in games:
        assert game.places is not None
        before = [Rating(m, s) for m, s in expected]
        expected = openskill_after(before, list(game.places))
    assert (ann.mu, ann.sigma) == expected[0]
    assert ann.rating == ann.mu - 3 * ann.sigma
