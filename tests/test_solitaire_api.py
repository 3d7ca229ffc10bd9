"""Solitaire over HTTP: record sheets in every format, any version or seat, and the leaderboard."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from flask.testing import FlaskClient
from pypdf import PdfReader

Json = dict[str, Any]


class Player:
    def __init__(self, client: FlaskClient, players: list[str], rules: Json) -> None:
        self.client = client
        body = {"players": players, "rules": rules, "dice": "manual"}
        created = client.post("/v1/games", json=body).get_json()
        self.id = created["game"]["id"]
        self.tokens = [s["token"] for s in created["seats"]]
        self.game: Json = created["game"]

    def act(self, **action: Any) -> Json:
        seat = self.game["turn"]["player"]
        response = self.client.post(
            f"/v1/games/{self.id}/actions",
            json=action,
            headers={"Authorization": f"Bearer {self.tokens[seat]}"},
        )
        assert response.status_code == 200, response.get_json()
        self.game = response.get_json()["game"]
        return self.game

    def claim(self, column: int) -> None:
        """Climb ``column`` to its top in one turn with dice pairing to it twice, then stop."""
        low = max(1, column - 6)
        dice = [low, column - low, low, column - low]
        while True:
            self.act(type="roll", dice=dice)
            legal = [a["sums"] for a in self.game["legal_actions"]]
            self.act(type="move", sums=[column, column] if [column, column] in legal else [column])
            height = next(c["height"] for c in self.game["columns"] if c["column"] == column)
            if self.game["turn"]["runners"].get(str(column)) == height:
                self.act(type="stop")
                return

    def bust(self) -> None:
        """Place runners on 10, 11 and 12, then roll ones: a bust that loses them."""
        self.act(type="roll", dice=[6, 6, 5, 6])
        self.act(type="move", sums=[11, 12])
        self.act(type="roll", dice=[4, 6, 4, 6])
        self.act(type="move", sums=[10, 10])
        self.act(type="roll", dice=[1, 1, 1, 1])

    def sheet(self, accept: str, **params: Any) -> Any:
        return self.client.get(
            f"/v1/games/{self.id}/record-sheet", headers={"Accept": accept}, query_string=params
        )


def test_finished_easy_solitaire_sheet_in_every_format(client: FlaskClient) -> None:
    game = Player(client, ["Sol"], {"solitaire": "easy"})
    game.bust()
    for column in range(2, 13):
        game.claim(column)
    assert game.game["status"] == "finished"
    assert game.game["solitaire"] == {
        "mode": "easy",
        "turns": 12,
        "target": 30,
        "rating": "Target met",
    }

    text = game.sheet("text/plain")
    assert text.status_code == 200 and text.mimetype == "text/plain"
    lines = text.get_data(as_text=True).splitlines()
    assert lines[0] == "Can't Stop solitaire (easy) – Sol"
    assert lines[1] == "1. S"
    assert lines[2] == "2. 2×3, 2 Cap"
    assert lines[7] == "7. 7×13, 7 Cap"
    assert lines[12] == "12. 12×3, 12 Cap"
    assert any("12" in line and "Score" in line for line in lines[13:])
    assert any("Target met" in line for line in lines[13:])

    rows = list(csv.reader(io.StringIO(game.sheet("text/csv").get_data(as_text=True))))
    assert rows[0] == ["turn", "result", "progress", "wiped", "captured", "claimed_total"]
    assert rows[1][:2] == ["1", "bust"]
    assert rows[-1][0] == "12" and rows[-1][-1] == "11"

    data = game.sheet("application/json").get_json()
    assert data["score"] == 12 and data["rating"] == "Target met" and data["target"] == 30
    assert [r["text"] for r in data["rows"]][:2] == ["S", "2×3, 2 Cap"]

    pdf = game.sheet("application/pdf")
    assert pdf.mimetype == "application/pdf"
    # One URL, a body per media type: every answer says it varies with Accept (for caches).
    for answer in (text, pdf, game.sheet("text/csv"), game.sheet("application/json")):
        assert "Accept" in answer.vary, answer.headers
    extracted = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf.data)).pages)
    for row in data["rows"][1:]:
        assert row["text"] in extracted
    assert "Target met" in extracted


def test_sheet_of_a_past_version_and_of_a_seat(client: FlaskClient) -> None:
    game = Player(client, ["Ann", "Bob"], {})
    game.claim(2)  # Ann
    game.bust()  # Bob
    assert game.sheet("text/plain").status_code == 422  # a multiplayer game needs ?seat=
    bob = game.sheet("text/plain", seat=1).get_data(as_text=True).splitlines()
    assert bob[1:] == ["1. S"]
    ann_then = game.sheet("text/plain", seat=0, version=3).get_data(as_text=True).splitlines()
    assert ann_then[1:] == []
    assert game.sheet("text/plain", seat=2).status_code == 422
    assert game.sheet("text/plain", seat=0, version=999).status_code == 404


def test_unservable_accept_is_406(client: FlaskClient) -> None:
    game = Player(client, ["Sol"], {})
    response = game.sheet("image/png")
    assert response.status_code == 406
    assert response.get_json()["code"] == "not_acceptable"
    assert game.sheet("image/png; charset=utf-8").status_code == 406


@pytest.mark.parametrize(
    ("accept", "served"),
    [
        ("text/csv; charset=utf-8", "text/csv"),
        ("text/plain;charset=UTF-8", "text/plain"),
        ("application/json; charset=utf-8", "application/json"),
        ("text/csv;q=0.5;charset=utf-8, application/pdf; version=1.7", "application/pdf"),
    ],
)
def test_media_type_parameters_in_accept_still_choose_the_type(
    client: FlaskClient, accept: str, served: str
) -> None:
    """Werkzeug matches a range's parameters exactly: ``text/csv; charset=utf-8`` was 406."""
    response = Player(client, ["Sol"], {}).sheet(accept)
    assert response.status_code == 200 and response.mimetype == served


def test_advanced_sheet_lists_wiped_markers(client: FlaskClient) -> None:
    game = Player(client, ["Sol"], {"solitaire": "advanced"})
    game.act(type="roll", dice=[1, 1, 1, 2])
    game.act(type="move", sums=[2, 3])
    game.act(type="stop")
    game.act(type="roll", dice=[1, 1, 1, 2])  # runners on 2 and 3, where the markers are
    game.act(type="move", sums=[2, 3])
    game.act(type="roll", dice=[1, 3, 1, 3])
    game.act(type="move", sums=[4, 4])
    game.act(type="roll", dice=[6, 6, 6, 6])  # bust: the markers on 2 and 3 are wiped
    lines = game.sheet("text/plain").get_data(as_text=True).splitlines()
    assert lines[1:] == ["1. 2×1, 3×1", "2. S – 2,3"]
