"""A finished game keeps no snapshots but those at multiples of ``Store.KEPT_WHEN_FINISHED``
(service/application/store.py: ~6 KB a game, docs/scaling.md "Bytes per game"): its state, past
versions, events, export, audit and record sheet read the same without them, a store written
before (a finished game's snapshots all kept) is read as it was, and a failure to delete them
never fails the action that finished the game."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import OperationalError
from flask import Flask
from flask.testing import FlaskClient

from domain.game import Game
from service import cli
from service.application.store import Store
from tests.support.games import choose, create_game, play_to_the_end
from tests.support.stored import answers, served


def snapshot_versions(app: Flask, game_id: str) -> list[int]:
    store = app.extensions["cantstop"].games.store
    assert store.snapshots is not None
    return [s.originator_version for s in store.snapshots.get(uuid.UUID(game_id))]


def test_a_finished_game_keeps_no_snapshot_and_reads_as_it_did_with_them(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A game finished by the code before (every snapshot kept) reads as it did; without its
    snapshots (as this code leaves a game it finishes), every answer is the same, byte for
    byte; a game finished now keeps none."""
    with monkeypatch.context() as before:
        before.setattr(Store, "_thin_out", lambda self, game_id: None)
        with served(database_url) as old:
            game_id, tokens = create_game(old, players=["Ann", "Bob"])
            state = play_to_the_end(old, game_id, tokens)
            assert state["status"] == "finished" and state["version"] >= 40
            kept = snapshot_versions(old.application, game_id)
            # One snapshot per multiple of the interval passed, taken as the save that passed
            # it left the game: on the multiple, or one version past it when a roll and its
            # bust (two events, one save) stepped over it (Store._snapshots_due).
            interval = Store.SNAPSHOT_INTERVALS[Game]
            assert kept and all(v % interval <= 1 for v in kept)
            assert len({v // interval for v in kept}) == len(kept)
            then = answers(old, game_id)
    with served(database_url) as new:  # a store written before: read as it was
        assert snapshot_versions(new.application, game_id) == kept
        assert answers(new, game_id) == then
        store = new.application.extensions["cantstop"].games.store
        store.snapshots.recorder.thin_out(uuid.UUID(game_id), Store.KEPT_WHEN_FINISHED)
        assert snapshot_versions(new.application, game_id) == [
            v for v in kept if v % Store.KEPT_WHEN_FINISHED == 0
        ]
    with served(database_url) as fresh:  # nothing cached: rebuilt from the events alone
        assert without_snapshots_detail(answers(fresh, game_id)) == without_snapshots_detail(then)
        other, other_tokens = create_game(fresh, players=["Cy", "Di"])
        state = play_to_the_end(fresh, other, other_tokens)
        assert state["status"] == "finished" and state["version"] < Store.KEPT_WHEN_FINISHED
        assert snapshot_versions(fresh.application, other) == []
        assert ok_audit(fresh, other)


def without_snapshots_detail(found: dict[str, bytes]) -> dict[str, Any]:
    """The answers, the audit's check of the snapshots without its detail (how many it
    compared: none once they are deleted); its verdict stays."""
    out: dict[str, Any] = dict(found)
    for path, body in found.items():
        if path.endswith("/audit"):
            verdict = json.loads(body)
            for check in verdict["checks"]:
                if check["name"] == "snapshots":
                    assert check["ok"] is True
                    check.pop("detail")
            out[path] = verdict
    return out


def ok_audit(client: FlaskClient, game_id: str) -> bool:
    verdict: dict[str, Any] = client.get(f"/v1/games/{game_id}/audit").get_json()
    return bool(verdict["valid"])


def test_a_long_finished_game_keeps_a_snapshot_every_kept_interval(
    app: Flask, client: FlaskClient, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots at multiples of KEPT_WHEN_FINISHED stay (here 40, for a short game): a past
    version of a finished game replays fewer events than that, however long the game; none is
    taken after the game finished."""
    monkeypatch.setattr(Store, "KEPT_WHEN_FINISHED", 40)
    for _ in range(20):  # the dice are the server's: a game may end before version 80
        game_id, tokens = create_game(client, players=["Ann", "Bob"])
        state = play_to_the_end(client, game_id, tokens)
        last = state["version"]
        if last >= 80:
            break
    assert last >= 80, "no game of 80 versions in 20"
    kept = snapshot_versions(app, game_id)
    assert kept == list(range(40, last + 1, 40))
    with served(database_url) as fresh:
        store = fresh.application.extensions["cantstop"].games.store
        read: list[int] = []
        original = store.repository.event_store.get

        def counting_get(*args: Any, **kwargs: Any) -> Any:
            events = list(original(*args, **kwargs))
            read.append(len(events))
            return events

        monkeypatch.setattr(store.repository.event_store, "get", counting_get)
        # Either side of the last snapshot kept, and the end (which may be that snapshot's own
        # version: a game that ends on a multiple keeps its snapshot there).
        for version in sorted({kept[-1] - 1, min(kept[-1] + 1, last), last}):
            past = fresh.get(f"/v1/games/{game_id}?version={version}").get_json()
            assert past["version"] == version
        assert read and max(read) < 40


def test_the_save_that_finishes_a_game_keeps_the_multiples_it_passes(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save that finishes a game may pass a multiple of KEPT_WHEN_FINISHED without ending
    on it (the winning stop, then the game's end): that snapshot is kept, taken at its exact
    version. With snapshots every 2 versions, every finishing save passes one."""
    intervals: dict[type[Aggregate], int] = {**Store.SNAPSHOT_INTERVALS, Game: 2}
    monkeypatch.setattr(Store, "SNAPSHOT_INTERVALS", intervals)
    monkeypatch.setattr(Store, "KEPT_WHEN_FINISHED", 2)
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    last = play_to_the_end(client, game_id, tokens)["version"]
    assert snapshot_versions(app, game_id) == list(range(2, last + 1, 2))
    assert ok_audit(client, game_id)  # the audit compares each snapshot with the events


def test_a_failed_deletion_of_snapshots_is_logged_and_the_game_still_finishes(
    app: Flask,
    client: FlaskClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = app.extensions["cantstop"].games.store
    recorder = store.snapshots.recorder

    def fails(originator_id: uuid.UUID, keep_every: int) -> None:
        raise OperationalError("the disk is full")

    monkeypatch.setattr(recorder, "thin_out", fails)
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    with caplog.at_level(logging.WARNING, logger="cantstop"):
        state = play_to_the_end(client, game_id, tokens)
    assert state["status"] == "finished"
    assert "snapshots were not thinned out" in caplog.text
    assert snapshot_versions(app, game_id)  # left as they were: still right
    assert ok_audit(client, game_id)


def test_cantstop_snapshots_thin_thins_out_a_store_written_before(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The games finished before keep every snapshot; ``cantstop snapshots thin`` leaves them
    those at multiples of KEPT_WHEN_FINISHED (here 40), a game going on all of its own, and
    reads the same answers after; run again, it finds the same and changes nothing."""
    monkeypatch.setattr(Store, "KEPT_WHEN_FINISHED", 40)
    with monkeypatch.context() as before:
        before.setattr(Store, "_thin_out", lambda self, game_id: None)
        with served(database_url) as old:
            finished = []
            for names in (["Ann", "Bob"], ["Cy", "Di"]):
                game_id, tokens = create_game(old, players=names)
                play_to_the_end(old, game_id, tokens)
                finished.append(game_id)
            going_on, going_on_tokens = create_game(old, players=["Ed", "Flo"])
            for _ in range(45):
                game = old.get(f"/v1/games/{going_on}").get_json()
                token = {"Authorization": f"Bearer {going_on_tokens[game['turn']['player']]}"}
                response = old.post(
                    f"/v1/games/{going_on}/actions", json=choose(game), headers=token
                )
                assert response.status_code == 200
            app = old.application
            kept = {g: snapshot_versions(app, g) for g in (*finished, going_on)}
            assert all(kept.values())
            then = {g: answers(old, g) for g in finished}
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", database_url)
    for _ in range(2):
        assert cli.main(["snapshots", "thin"]) == 0
        assert "snapshots of 2 finished game(s) thinned out" in capsys.readouterr().err
    with served(database_url) as fresh:
        app = fresh.application
        for game_id in finished:
            assert snapshot_versions(app, game_id) == [v for v in kept[game_id] if v % 40 == 0]
            assert without_snapshots_detail(answers(fresh, game_id)) == without_snapshots_detail(
                then[game_id]
            )
        assert snapshot_versions(app, going_on) == kept[going_on]
