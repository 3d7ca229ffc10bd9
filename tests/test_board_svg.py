"""The board picture (service/board_svg.py), drawn from real states built through the domain."""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from domain.commands import NewGame
from domain.game import Game
from domain.rules import column_height
from domain.view import game_state
from service.render.board_svg import PALETTE, SVG_NS, colour_of, render_board

TAG = "{" + SVG_NS + "}"


# ------------------------------------------------------------------------------------ helpers
def new_game(players: list[str] | None = None, **kwargs: Any) -> Game:
    return Game.start(
        uuid.uuid4(),
        NewGame(players=players or ["Ann", "Bob", "Cy"], dice="manual", first_player=0, **kwargs),
    )


def turn(game: Game, seat: int, dice: list[int], sums: list[int], *, stop: bool = True) -> None:
    game.roll(seat, dice=dice)
    game.move(seat, sums)
    if stop:
        game.stop(seat)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.encode("utf-8"))


def svg_of(game: Game, **kwargs: Any) -> ET.Element:
    return parse(render_board(game_state(game, str(game.id)), **kwargs))


def with_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [el for el in root.iter() if cls in el.get("class", "").split()]


def one(root: ET.Element, cls: str, **data: Any) -> ET.Element:
    found = [
        el
        for el in with_class(root, cls)
        if all(el.get("data-" + k.replace("_", "-")) == str(v) for k, v in data.items())
    ]
    assert len(found) == 1, (cls, data, len(found))
    return found[0]


def column_group(root: ET.Element, column: int) -> ET.Element:
    return one(root, "column", column=column)


def legend(root: ET.Element, seat: int) -> ET.Element:
    return one(root, "legend-entry", seat=seat)


def text_of(el: ET.Element) -> str:
    return "".join(el.itertext()).strip()


@pytest.fixture
def claimed_game() -> Game:
    """Ann has claimed 2 and 12; Bob and Cy share column 7 space 2; Ann's turn 4, not rolled."""
    game = new_game()
    for _ in range(3):
        turn(game, 0, [1, 1, 6, 6], [2, 12])
        if game.markers[1][7] == 0:
            turn(game, 1, [3, 4, 3, 4], [7, 7])
            turn(game, 2, [3, 4, 3, 4], [7, 7])
        else:
            turn(game, 1, [2, 2, 3, 3], [4, 6])
            turn(game, 2, [2, 2, 3, 3], [4, 6])
    return game


# --------------------------------------------------------------------------------- document
def test_a_standalone_svg_document_with_title_desc_viewbox_and_size() -> None:
    game = new_game()
    svg = render_board(game_state(game, str(game.id)))
    assert svg.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg')
    root = parse(svg)
    assert root.tag == TAG + "svg"
    assert root.get("class") == "cantstop-board"
    width, height = int(root.attrib["width"]), int(root.attrib["height"])
    assert root.get("viewBox") == f"0 0 {width} {height}"
    assert width > 400 and height > 400
    assert root[0].tag == TAG + "title" and root[1].tag == TAG + "desc"
    assert str(game.id) in (root[0].text or "")
    assert root.get("aria-labelledby") == "board-title board-desc"
    desc = root[1].text or ""
    assert "Ann (seat 0)" in desc and "Cy (seat 2)" in desc
    assert root.get("data-status") == "in_progress"
    assert root.get("data-version") == str(game.version)
    assert root.get("data-game-id") == str(game.id)


def test_a_given_title_is_used() -> None:
    root = svg_of(new_game(), title="Dispute #7 & <co>")
    assert root[0].text == "Dispute #7 & <co>"
    assert text_of(one(root, "header-title")) == "Dispute #7 & <co>"


def test_deterministic_and_independent_of_a_json_round_trip(claimed_game: Game) -> None:
    claimed_game.roll(0, dice=[3, 4, 2, 2])
    state = game_state(claimed_game, str(claimed_game.id))
    first = render_board(state)
    assert render_board(state) == first
    assert render_board(json.loads(json.dumps(state))) == first
    assert render_board(game_state(claimed_game, str(claimed_game.id))) == first


def test_text_xml_cannot_carry_is_replaced_not_emitted() -> None:
    root = svg_of(new_game(), title="bell\x07 and nul\x00")
    assert root[0].text == "bell\ufffd and nul\ufffd"


# ---------------------------------------------------------------------------------- columns
def test_one_column_group_per_sum_with_its_spaces_bottom_to_top() -> None:
    root = svg_of(new_game())
    groups = with_class(root, "column")
    assert [int(g.attrib["data-column"]) for g in groups] == list(range(2, 13))
    for group in groups:
        column = int(group.attrib["data-column"])
        height = column_height(column, 6)
        assert group.get("data-height") == str(height)
        assert group.get("id") == f"column-{column}"
        spaces = [el for el in group if "space" in el.get("class", "").split()]
        assert [int(s.attrib["data-space"]) for s in spaces] == list(range(1, height + 1))
        assert all(s.get("data-column") == str(column) for s in spaces)
        ys = [float(s.attrib["y"]) for s in spaces]
        assert ys == sorted(ys, reverse=True), "space 1 at the bottom, the top space highest"
        assert text_of(one(group, "column-label")) == str(column)
        assert group.get("data-claimed-by") is None


def test_the_columns_form_a_hill_on_a_common_base() -> None:
    root = svg_of(new_game())
    tops, bottoms = [], []
    for group in with_class(root, "column"):
        spaces = [el for el in group if "space" in el.get("class", "").split()]
        tops.append(float(spaces[-1].attrib["y"]))
        bottoms.append(float(spaces[0].attrib["y"]))
    assert len(set(bottoms)) == 1
    assert tops[:6] == sorted(tops[:6], reverse=True)  # rising to 7 ...
    assert tops[5:] == sorted(tops[5:])  # ... and falling after it
    assert tops == tops[::-1]
    xs = [float(with_class(g, "track")[0].attrib["x"]) for g in with_class(root, "column")]
    assert xs == sorted(xs)


def test_eight_sided_dice_board_has_fifteen_columns() -> None:
    game = new_game(["Ann", "Bob"], rules={"dice_faces": 8})
    turn(game, 0, [8, 8, 1, 2], [3, 16])
    root = svg_of(game)
    groups = with_class(root, "column")
    assert [int(g.attrib["data-column"]) for g in groups] == list(range(2, 17))
    heights = [len(with_class(g, "space")) for g in groups]
    assert heights == [column_height(c, 8) for c in range(2, 17)]
    assert max(heights) == 17 and heights[7] == 17
    assert one(root, "marker", seat=0, column=16).get("data-space") == "1"
    assert "8-sided dice" in text_of(one(root, "header-rules"))


# ---------------------------------------------------------------------------------- markers
def test_markers_at_their_column_and_space_in_their_players_colour(claimed_game: Game) -> None:
    root = svg_of(claimed_game)
    expected = {
        (seat, column, at)
        for seat, row in enumerate(claimed_game.markers)
        for column, at in enumerate(row)
        if at
    }
    assert expected == {(0, 2, 3), (0, 12, 3)} | {(s, c, 2) for s in (1, 2) for c in (4, 6, 7)}
    markers = with_class(root, "marker")
    found = {
        (int(m.attrib["data-seat"]), int(m.attrib["data-column"]), int(m.attrib["data-space"]))
        for m in markers
    }
    assert found == expected
    for seat, column, at in expected:
        marker = one(column_group(root, column), "marker", seat=seat)
        assert marker.tag == TAG + "circle"
        assert marker.get("fill") == colour_of(seat)
        assert marker.get("id") == f"marker-{seat}-{column}"
        assert f"seat-{seat}" in marker.attrib["class"].split()
        assert marker.get("data-space") == str(at)


def test_a_marker_sits_inside_its_space() -> None:
    game = new_game()
    turn(game, 0, [1, 2, 3, 4], [3, 7])  # 3 at 1, 7 at 1
    turn(game, 1, [3, 4, 3, 4], [7, 7])  # Bob 7 at 2
    root = svg_of(game)
    for seat, column, at in ((0, 3, 1), (0, 7, 1), (1, 7, 2)):
        space = one(column_group(root, column), "space", space=at)
        marker = one(root, "marker", seat=seat, column=column)
        x, y = float(space.attrib["x"]), float(space.attrib["y"])
        w, h = float(space.attrib["width"]), float(space.attrib["height"])
        assert x < float(marker.attrib["cx"]) < x + w
        assert y < float(marker.attrib["cy"]) < y + h


def test_several_markers_on_one_space_are_side_by_side(claimed_game: Game) -> None:
    root = svg_of(claimed_game)
    bob = one(root, "marker", seat=1, column=7)
    cy = one(root, "marker", seat=2, column=7)
    assert bob.get("data-space") == cy.get("data-space") == "2"
    assert bob.get("cy") == cy.get("cy")
    gap = float(cy.attrib["cx"]) - float(bob.attrib["cx"])
    assert gap >= float(bob.attrib["r"]) + float(cy.attrib["r"]), "they must not overlap"


def test_eight_players_each_have_a_distinct_colour_even_on_one_space() -> None:
    names = ["Ann", "Bob", "Cy", "Dee", "Eve", "Fay", "Gus", "Hal"]
    game = new_game(names)
    for seat in range(8):
        turn(game, seat, [3, 4, 3, 4], [7, 7])
    root = svg_of(game)
    markers = [one(root, "marker", seat=seat, column=7) for seat in range(8)]
    assert {m.get("data-space") for m in markers} == {"2"}
    assert len({m.get("fill") for m in markers}) == 8
    assert len({(m.get("cx"), m.get("cy")) for m in markers}) == 8
    assert len({colour for colour, _, _ in PALETTE}) == 8
    swatches = [one(legend(root, seat), "legend-swatch").get("fill") for seat in range(8)]
    assert swatches == [colour_of(seat) for seat in range(8)]


# ---------------------------------------------------------------------------------- runners
def test_runners_during_a_turn_and_none_after_it() -> None:
    game = new_game()
    game.roll(0, dice=[1, 5, 4, 6])
    root = svg_of(game)
    assert with_class(root, "runner") == []
    assert [int(d.attrib["data-value"]) for d in with_class(root, "die")] == [1, 5, 4, 6]
    assert [text_of(d) for d in with_class(root, "die")] == ["1", "5", "4", "6"]

    game.move(0, [6, 10])
    root = svg_of(game)
    runners = with_class(root, "runner")
    assert {(r.get("data-column"), r.get("data-space")) for r in runners} == {
        ("6", "1"),
        ("10", "1"),
    }
    for runner in runners:
        assert runner.tag == TAG + "polygon"  # a shape distinct from the markers' circles
        assert runner.get("fill") == "#ffffff" and runner.get("stroke") == "#000000"
        assert runner.get("data-seat") == "0"
        assert runner in list(column_group(root, int(runner.attrib["data-column"])))
    assert with_class(root, "die") == []  # dice are only shown while waiting to be used

    game.stop(0)
    root = svg_of(game)
    assert with_class(root, "runner") == []
    assert {(m.get("data-column"), m.get("data-space")) for m in with_class(root, "marker")} == {
        ("6", "1"),
        ("10", "1"),
    }


def test_a_runner_beside_markers_on_the_same_space() -> None:
    game = new_game()
    turn(game, 0, [3, 4, 3, 4], [7, 7])  # Ann's marker at 7:2
    turn(game, 1, [3, 4, 3, 4], [7, 7])  # Bob's marker at 7:2
    turn(game, 2, [3, 4, 1, 1], [2, 7], stop=False)  # Cy's runner at 7:1
    game.roll(2, dice=[3, 4, 1, 1])
    game.move(2, [2, 7])  # Cy's runner at 7:2
    root = svg_of(game)
    runner = one(root, "runner", column=7)
    assert runner.get("data-space") == "2" and runner.get("data-seat") == "2"
    pieces = [one(root, "marker", seat=s, column=7) for s in (0, 1)]
    xs = [float(p.attrib["cx"]) for p in pieces]
    points = [tuple(map(float, pt.split(","))) for pt in runner.attrib["points"].split()]
    runner_x = sum(x for x, _ in points) / len(points)
    assert xs[0] < xs[1] < runner_x


# --------------------------------------------------------------------------------- claiming
def test_a_claimed_column_is_marked_with_its_claimant(claimed_game: Game) -> None:
    root = svg_of(claimed_game)
    for column in (2, 12):
        group = column_group(root, column)
        assert group.get("data-claimed-by") == "0"
        assert "claimed" in group.attrib["class"].split()
        star = one(group, "claim-star")
        assert star.get("data-seat") == "0" and star.get("fill") == colour_of(0)
        top = one(group, "space", space=3)
        assert "top" in top.attrib["class"].split()
        assert top.get("fill") == colour_of(0)
        assert all(s.get("fill") == colour_of(0) for s in with_class(group, "space"))
        assert one(group, "track").get("stroke") == colour_of(0)
        assert one(group, "marker", seat=0).get("data-space") == "3"
    assert with_class(column_group(root, 7), "claim-star") == []
    entry = legend(root, 0)
    assert entry.get("data-claimed") == "2"
    assert text_of(one(entry, "legend-claimed")) == "claimed 2 of 3: 2, 12"
    assert legend(root, 1).get("data-claimed") == "0"


# ----------------------------------------------------------------------------------- header
def test_header_shows_status_version_turn_and_dice(claimed_game: Game) -> None:
    claimed_game.roll(0, dice=[2, 3, 4, 4])
    root = svg_of(claimed_game)
    status = text_of(one(root, "header-status"))
    assert "In progress" in status and f"version {claimed_game.version}" in status
    turn_text = text_of(one(root, "header-turn"))
    assert turn_text == f"Ann (seat 0) to choose a move · turn {claimed_game.turn_number}"
    assert one(root, "header-swatch").get("fill") == colour_of(0)
    assert [text_of(d) for d in with_class(root, "die")] == ["2", "3", "4", "4"]
    assert with_class(root, "header-winner") == []


def test_finished_game_shows_the_winner_and_no_turn(claimed_game: Game) -> None:
    for _ in range(5):  # Ann climbs 3 (5 spaces) for her third column
        claimed_game.roll(0, dice=[1, 2, 4, 4])
        claimed_game.move(0, [3, 8])
    claimed_game.stop(0)
    assert claimed_game.status == "finished"
    root = svg_of(claimed_game)
    assert "Finished" in text_of(one(root, "header-status"))
    winner = text_of(one(root, "header-winner"))
    assert "Ann (seat 0)" in winner and "claimed 3 columns" in winner
    assert with_class(root, "header-turn") == [] and with_class(root, "runner") == []
    assert column_group(root, 3).get("data-claimed-by") == "0"
    assert "winner" in text_of(one(legend(root, 0), "legend-status"))
    assert root[0].text and "Winner: Ann (seat 0)" in (root[1].text or "")


def test_a_lobby_game_renders_with_open_seats() -> None:
    game = Game.start(uuid.uuid4(), NewGame(seats=3, dice="manual"))
    root = svg_of(game)
    assert root.get("data-status") == "waiting"
    assert "3 open seats" in text_of(one(root, "header-status"))
    assert text_of(one(legend(root, 1), "legend-name")) == "open seat 1"
    assert len(with_class(root, "column")) == 11


# ----------------------------------------------------------------------------------- legend
def test_legend_names_every_player_with_colour_and_resignation() -> None:
    game = new_game(["Ann", "Bob", "Cy", "Dee"])
    turn(game, 0, [1, 2, 3, 4], [3, 7])
    game.resign(2)
    root = svg_of(game)
    entries = with_class(root, "legend-entry")
    assert [e.get("data-seat") for e in entries] == ["0", "1", "2", "3"]
    for seat, name in enumerate(["Ann", "Bob", "Cy", "Dee"]):
        entry = legend(root, seat)
        label = one(entry, "legend-name")
        assert label.get("data-name") == name
        assert text_of(label) == f"{name} (seat {seat})"
        assert entry.get("data-colour") == colour_of(seat)
        assert one(entry, "legend-swatch").get("fill") == colour_of(seat)
        assert text_of(one(entry, "legend-claimed")) == "claimed 0 of 3"
        assert entry.get("data-resigned") == ("true" if seat == 2 else "false")
    assert "(resigned)" in text_of(one(legend(root, 2), "legend-status"))
    assert "resigned" in legend(root, 2).attrib["class"].split()
    assert "to play" in text_of(one(legend(root, 1), "legend-status"))
    assert with_class(legend(root, 3), "legend-status") == []


def test_names_with_markup_characters_are_escaped() -> None:
    name = '<Ann & "Bo">'
    game = new_game([name, "Bob's"])
    turn(game, 0, [1, 2, 3, 4], [3, 7])
    svg = render_board(game_state(game, str(game.id)))
    assert name not in svg  # never pasted into the markup as is
    assert "&lt;Ann &amp; " in svg
    root = parse(svg)
    label = one(legend(root, 0), "legend-name")
    assert label.get("data-name") == name
    assert text_of(label) == f"{name} (seat 0)"
    assert one(legend(root, 1), "legend-name").get("data-name") == "Bob's"
    assert one(root, "marker", seat=0, column=3).get("data-seat") == "0"
    assert text_of(one(root, "header-turn")).startswith("Bob's (seat 1) to roll")
    assert f"{name} (seat 0)" in (root[1].text or "")
    game.resign(1)
    root = svg_of(game)
    assert text_of(one(root, "header-winner")).startswith(f"{name} (seat 0)")
