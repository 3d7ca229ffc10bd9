"""bench/bytes.py measures what a finished game occupies, on both stores, in rows and once
archived: the parts add up to the whole, and the events' payload is split into what an encoding
could save."""

from __future__ import annotations

import json

import pytest

from bench import bytes as bench_bytes


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_bytes_per_game_by_part(
    store: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", "unset")  # the bench sets it; restored after
    monkeypatch.setenv("CANTSTOP_RATE_LIMITS", "off")
    args = ["--games", "3"]
    if store == "postgres":
        args += ["--postgres", request.getfixturevalue("postgres_server_url")]
    assert bench_bytes.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["store"] == {"sqlite": "sqlite", "postgres": "postgresql"}[store]
    assert result["games"] == 3
    parts = result["parts"]
    assert parts["events"] > 0 and parts.get("snapshots", 0) < parts["events"] / 10
    assert abs(sum(parts.values()) - result["bytes_per_game"]) <= len(parts)  # rounding
    payload = result["event_payload_per_game"]
    assert payload["game: hash chain"] > 0 and payload["game: timestamps"] > 0
    assert result["events_per_game"] > 10
    # Then every finished game archived (and the space of its rows given back): less than the
    # rows took (on PostgreSQL three games cannot show by how much: the archive's new table and
    # its indexes take a few pages each, whatever the games; SQLite's pages are shared).
    archived = result["archived"]
    assert archived["outcomes"] == {"archived": 3}
    limit = result["bytes_per_game"] / (2 if store == "sqlite" else 1)
    assert 0 < archived["bytes_per_game"] < limit
    shares = archived["parts"]
    assert abs(sum(shares.values()) - archived["bytes_per_game"]) <= len(shares)
    assert shares["archived games"] > 0


def test_a_seed_plays_the_same_games(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--seed`` two runs (two trees) measure the same games: on SQLite, to the byte."""
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", "unset")
    monkeypatch.setenv("CANTSTOP_RATE_LIMITS", "off")
    results = []
    for _ in range(2):
        assert bench_bytes.main(["--games", "2", "--seed", "5"]) == 0
        result = json.loads(capsys.readouterr().out)
        results.append((result["events_per_game"], result["parts"]))
    assert results[0] == results[1]
