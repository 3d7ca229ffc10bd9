"""Positions anywhere in a game, for hypothesis: the strategies and odds are checked on them."""

from __future__ import annotations

from hypothesis import strategies as st

from domain.moves import UNCLAIMED
from domain.position import Position
from domain.rules import Rules


@st.composite
def positions(draw: st.DrawFn, faces: int | None = None, phase: str = "roll_or_stop") -> Position:
    """A position anywhere in a game: 1–3 seats, claimed columns, markers, up to three runners
    (often topped), under jumping or steep hill, with six- or eight-sided dice."""
    faces = draw(st.sampled_from([6, 8])) if faces is None else faces
    rules = Rules(
        columns_to_win=3,
        jumping=draw(st.booleans()),
        steep_hill=draw(st.booleans()),
        dice_faces=faces,
    )
    heights = rules.heights
    seats = draw(st.integers(1, 3))
    seat = draw(st.integers(0, seats - 1))
    markers = [[0] * len(heights) for _ in range(seats)]
    claimed = [UNCLAIMED] * len(heights)
    for c in rules.columns:
        if draw(st.integers(0, 5)) == 0:
            claimed[c] = draw(st.integers(0, seats - 1))
            markers[claimed[c]][c] = heights[c]
            continue
        for s in range(seats):
            if draw(st.booleans()):
                markers[s][c] = draw(st.integers(0, heights[c] - 1))
    open_columns = [c for c in rules.columns if claimed[c] == UNCLAIMED]
    chosen = (
        draw(st.lists(st.sampled_from(open_columns), max_size=3, unique=True))
        if open_columns
        else []
    )
    runners = [0] * len(heights)
    own = markers[seat]
    for c in chosen:
        low = own[c] if (rules.steep_hill and own[c]) else own[c] + 1
        runners[c] = heights[c] if draw(st.booleans()) else draw(st.integers(low, heights[c]))
    dice = None
    if phase == "move":
        dice = draw(st.tuples(*[st.integers(1, faces)] * 4))
        board = Position.make(rules, markers, seat=seat, claimed=claimed).board()
        if not board.legal_moves(dice, runners):
            dice = None
    return Position.make(
        rules,
        markers,
        seat=seat,
        claimed=claimed,
        runners=runners,
        phase=phase if dice or phase != "move" else "roll_or_stop",
        dice=dice,
    )
