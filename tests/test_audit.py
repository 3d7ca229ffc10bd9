"""Auditing a game's history: the pure audit, tampering in the database, and ``cantstop audit``.

The pure tests build histories with the domain alone (a fixed seed, so every game is the same);
the tampering tests change stored rows directly in SQLite and PostgreSQL behind the service's back,
then ask ``/audit`` (and ``cantstop audit`` on the export, tampered the same way) for the verdict.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.domain import DomainEvent, Snapshot
from flask import Flask
from flask.testing import FlaskClient

from domain import fairness
from domain.audit import audit_records, parse_export
from domain.commands import NewGame
from domain.game import ZERO_HASH, Game, chain_hash, event_records, format_at
from domain.transcript import apply_action
from domain.view import game_state
from service import cli
from service.config import Settings
from service.http.app import create_app
from tests.support.games import choose, export_text, play_manual
from tests.support.http import bearer, ok
from tests.support.stored import StoredRows

SEED = "5eed" * 16
VERIFY_SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "verify_export.py"
Records = list[dict[str, Any]]


# ------------------------------------------------------------------------------ histories
def drive(game: Game, draw: Any, limit: int) -> None:
    """Play ``choose``'s action for the player to act, up to ``limit`` actions or the game's end."""
    for _ in range(limit):
        if game.status != "in_progress":
            return
        assert game.current is not None
        action = choose(game_state(game))
        if action["type"] == "roll":
            game.roll(game.current, draw=draw)
        elif action["type"] == "move":
            game.move(game.current, action["sums"])
        else:
            game.stop(game.current)


def domain_game(
    players: list[str] | None = None,
    *,
    seed: str = SEED,
    actions: int | None = None,
    rules: dict[str, Any] | None = None,
) -> tuple[Game, Records]:
    """A server-dice game played with ``choose`` (to the end and revealed, or ``actions`` long)."""
    game_id = uuid.UUID(int=7)
    draw = functools.partial(fairness.draw, seed, str(game_id))
    game = Game.start(
        game_id,
        NewGame(players=players or ["Ann", "Bob"], rules=rules),
        server_seed=seed,
        draw=draw,
    )
    drive(game, draw, 100_000 if actions is None else actions)
    if game.status == "finished":
        game.reveal_seed(seed)
    return game, [json.loads(json.dumps(r)) for r in event_records(game.collect_events())]


def rehash(records: Records) -> Records:
    """Recompute every version and hash, as a forger who rewrites the whole chain would."""
    previous = ZERO_HASH
    for version, record in enumerate(records, start=1):
        record.update(version=version, prev_hash=previous)
        record["hash"] = chain_hash(previous, version, record["type"], record["at"], record["data"])
        previous = record["hash"]
    return records


def failing(verdict: dict[str, Any]) -> dict[str, int | None]:
    return {c["name"]: c["version"] for c in verdict["checks"] if not c["ok"]}


def first(records: Records, kind: str, after: int = 0) -> int:
    """The index of the first record of ``kind`` after index ``after``."""
    return next(i for i, r in enumerate(records) if r["type"] == kind and i > after)


@pytest.fixture(scope="module")
def finished() -> tuple[Game, Records]:
    return domain_game()


# ------------------------------------------------------------------------------ pure audit
def test_event_records_serve_game_events_and_refuse_anything_else() -> None:
    game, records = domain_game(actions=3)
    assert [r["version"] for r in records] == list(range(1, len(records) + 1))
    with pytest.raises(TypeError, match="not a game event: Snapshot"):
        event_records([Snapshot.take(game)])


def test_a_finished_server_dice_game_verifies_every_check(finished: tuple[Game, Records]) -> None:
    game, records = finished
    verdict = audit_records(records, live_state=game_state(game, "any id"))
    assert verdict["valid"] is True
    assert verdict["first_bad_version"] is None
    names = [c["name"] for c in verdict["checks"]]
    assert names == ["chain", "rules", "dice", "final_state", "deadlines"]
    assert all(c["ok"] for c in verdict["checks"])
    dice = next(c for c in verdict["checks"] if c["name"] == "dice")
    assert "match the revealed seed" in dice["detail"]
    assert records[-1]["type"] == "SeedRevealed"


def test_draws_are_pending_until_the_seed_is_revealed() -> None:
    game, records = domain_game(actions=20)
    assert game.status == "in_progress"
    verdict = audit_records(records, live_state=game_state(game))
    assert verdict["valid"] is True
    dice = next(c for c in verdict["checks"] if c["name"] == "dice")
    assert dice["ok"] is True and dice["detail"].startswith("pending")


def test_a_forger_who_rewrites_the_chain_is_caught_by_the_rules_and_the_dice(
    finished: tuple[Game, Records],
) -> None:
    records = copy.deepcopy(finished[1])
    index = first(records, "DiceRolled", after=10)
    records[index]["data"]["dice"][0] = records[index]["data"]["dice"][0] % 6 + 1
    verdict = audit_records(rehash(records))
    version = index + 1
    assert failing(verdict) == {"rules": version, "dice": version}
    assert verdict["first_bad_version"] == version


def test_an_event_dated_before_the_one_it_follows_breaks_the_chain(
    finished: tuple[Game, Records],
) -> None:
    """A history rewritten with one time moved back, its chain recomputed, is caught at it; one
    moved far forward is caught at the next event (which is then dated before it)."""
    for moved, blamed in (("2000-01-01T00:00:00.000000Z", 0), ("9999-12-31T00:00:00.000000Z", 1)):
        records = copy.deepcopy(finished[1])
        index = first(records, "DiceRolled", after=10)
        records[index]["at"] = moved
        verdict = audit_records(rehash(records))
        version = index + 1 + blamed
        assert failing(verdict) == {"chain": version}
        chain = next(c for c in verdict["checks"] if c["name"] == "chain")
        assert f"before version {version - 1}" in chain["detail"]
    verdict = audit_records(finished[1])
    assert verdict["valid"] is True and "in time order" in verdict["checks"][0]["detail"]


def test_a_clock_stepped_back_never_dates_an_event_before_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock read behind the last event's time (NTP stepping it back, or another host a
    little behind): the event is dated at the last one's time, so the audit still passes."""
    game, before = domain_game(actions=5)
    last = game.modified_on
    behind = last - timedelta(minutes=5)
    monkeypatch.setattr(DomainEvent, "create_timestamp", staticmethod(lambda: behind))
    drive(game, functools.partial(fairness.draw, SEED, str(game.id)), 3)
    monkeypatch.undo()
    records = [json.loads(json.dumps(r)) for r in event_records(game.collect_events())]
    assert records and all(r["at"] == format_at(last) for r in records)
    assert audit_records(before + records)["valid"] is True


def test_a_derived_event_that_the_rules_do_not_produce_is_refused(
    finished: tuple[Game, Records],
) -> None:
    records = copy.deepcopy(finished[1])
    index = first(records, "TurnStopped", after=5)
    records[index]["data"]["next_player"] = records[index]["data"]["seat"]  # keep the turn
    verdict = audit_records(rehash(records))
    assert failing(verdict) == {"rules": index + 1}
    rules = next(c for c in verdict["checks"] if c["name"] == "rules")
    assert "next_player" in rules["detail"]


def manual_records(actions: list[dict[str, Any]]) -> Records:
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    for action in actions:
        apply_action(game, action)
    return [json.loads(json.dumps(r)) for r in event_records(game.collect_events())]


BUSTING = [
    {"type": "roll", "dice": [1, 1, 1, 2]},
    {"type": "move", "sums": [2, 3]},
    {"type": "roll", "dice": [6, 6, 6, 6]},
    {"type": "move", "sums": [12, 12]},
    {"type": "roll", "dice": [3, 3, 3, 3]},  # 6 and 6: three runners elsewhere, a bust
    {"type": "roll", "dice": [3, 4, 2, 6]},
]


def test_a_missing_bust_is_caught_where_the_rules_call_for_it() -> None:
    records = manual_records(BUSTING)
    assert audit_records(records)["valid"] is True
    index = first(records, "TurnBusted")
    del records[index]
    verdict = audit_records(rehash(records))
    assert failing(verdict) == {"rules": index + 1}
    rules = next(c for c in verdict["checks"] if c["name"] == "rules")
    assert "TurnBusted" in rules["detail"]


def test_a_manual_roll_turned_into_a_server_draw_is_refused() -> None:
    records = manual_records(BUSTING)
    index = first(records, "DiceRolled")
    records[index]["data"]["nonce"] = 0
    verdict = audit_records(rehash(records))
    assert failing(verdict) == {"rules": index + 1, "dice": index + 1}


def test_a_revealed_seed_that_breaks_the_commitment_is_refused(
    finished: tuple[Game, Records],
) -> None:
    records = copy.deepcopy(finished[1])
    records[-1]["data"]["server_seed"] = "f" * 64
    verdict = audit_records(rehash(records))
    assert failing(verdict) == {"rules": len(records), "dice": len(records)}


def test_a_seed_that_is_not_64_lowercase_hex_characters_fails_the_dice_check() -> None:
    """A forger's game drawn from a seed of its own making, the commitment made to match: the
    contract's seeds are 64 lowercase hex characters, and nothing else is one."""
    for seed in ("x", SEED.upper()):
        _, records = domain_game(seed=seed)
        verdict = audit_records(records)
        assert failing(verdict) == {"dice": len(records)}, seed
        dice = next(c for c in verdict["checks"] if c["name"] == "dice")
        assert "64 lowercase hex" in dice["detail"]


def test_dice_of_faces_no_game_has_fail_the_audit_without_drawing_them(
    finished: tuple[Game, Records],
) -> None:
    # A forger's export with 300-faced dice, its chain and commitment intact: a draw of 300
    # faces from bytes never ends, and the audit (an import's too) once drew it for ever.
    records = copy.deepcopy(finished[1])
    records[0]["data"]["rules"]["dice_faces"] = 300
    verdicts: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: verdicts.append(audit_records(rehash(records))))
    worker.start()
    worker.join(timeout=60)
    assert verdicts, "the audit did not end"
    assert failing(verdicts[0])["dice"] == 1
    with pytest.raises(ValueError, match="300 faces"):
        fairness.draw(SEED, "client", 0, 4, 300)


def test_a_finished_server_game_without_its_seed_is_invalid(
    finished: tuple[Game, Records],
) -> None:
    records = copy.deepcopy(finished[1])[:-1]  # drop SeedRevealed
    verdict = audit_records(records)
    assert failing(verdict) == {"dice": len(records) + 1}


def test_draw_nonces_must_count_up_from_zero(finished: tuple[Game, Records]) -> None:
    records = copy.deepcopy(finished[1])
    index = first(records, "DiceRolled", after=3)
    records[index]["data"]["nonce"] += 1
    verdict = audit_records(rehash(records))
    assert failing(verdict) == {"rules": index + 1, "dice": index + 1}
    rules = next(c for c in verdict["checks"] if c["name"] == "rules")
    assert "nonce" in rules["detail"]


def test_an_opening_roll_with_a_die_off_the_board_is_refused(
    finished: tuple[Game, Records],
) -> None:
    records = copy.deepcopy(finished[1])
    assert records[1]["type"] == "TurnOrderDecided"
    records[1]["data"]["draws"][0]["dice"] = [7, 1]
    verdict = audit_records(rehash(records))
    assert failing(verdict) == {"rules": 2, "dice": 2}


def test_the_replay_must_end_in_the_live_state(finished: tuple[Game, Records]) -> None:
    game, records = finished
    live = copy.deepcopy(game_state(game))  # a view's parts are shared: change a copy
    live["players"][0]["markers"] = {"7": 1}
    verdict = audit_records(records, live_state=live)
    assert failing(verdict) == {"final_state": len(records)}
    behind = dict(game_state(game), version=len(records) + 1)
    assert failing(audit_records(records, live_state=behind)) == {"final_state": len(records) + 1}
    broken = audit_records(records, live_error="OriginatorVersionError: gap")
    assert broken["valid"] is False and failing(broken) == {"final_state": None}


def test_lobbies_resignations_and_variants_replay_cleanly() -> None:
    draw = functools.partial(fairness.draw, SEED, "client")
    game = Game.start(
        uuid.uuid4(),
        NewGame(seats=3, rules={"columns_to_win": 1, "forced_move": True}, client_seed="client"),
        server_seed=SEED,
        draw=draw,
    )
    for name in ("Ann", "Bob", "Cy"):
        game.join(name, draw=draw)
    assert game.current is not None  # the lobby is full: the game has begun
    game.roll(game.current, draw=draw)
    game.resign((game.current + 1) % 3)
    drive(game, draw, 3000)
    game.reveal_seed(SEED)
    records = [json.loads(json.dumps(r)) for r in event_records(game.collect_events())]
    types = {r["type"] for r in records}
    assert {"SeatJoined", "PlayerResigned", "GameFinished", "SeedRevealed"} <= types
    verdict = audit_records(records, live_state=game_state(game))
    assert verdict["valid"] is True, verdict


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r: r.pop("hash"), "missing hash"),
        (lambda r: r.update(version="6"), "version is not an integer"),
        (lambda r: r.update(data=[1, 2]), "data is not an object"),
        (lambda r: r.update(data={"seat": [[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]}), "nested"),
        (lambda r: r.update(prev_hash="XYZ"), "prev_hash is not 64"),
        (lambda r: r.update(at="2026-01-01T00:00:00Z"), "not a time as served"),
        (lambda r: r.update(at="2026-02-30T00:00:00.000000Z"), "day is out of range"),
        (lambda r: r.update(at="2026-01-01T24:00:00.000000Z"), "hour must be in 0..23"),
        (lambda r: r.update(type=None), "type is not a string"),
        (lambda r: r.clear() or r.update(version=6, unreadable="cannot decode"), "cannot decode"),
    ],
)
def test_a_malformed_record_is_reported_at_its_version_never_raised(
    finished: tuple[Game, Records], change: Callable[[dict[str, Any]], Any], problem: str
) -> None:
    records = copy.deepcopy(finished[1][:12])
    change(records[5])
    verdict = audit_records(records)
    assert verdict["valid"] is False
    assert verdict["first_bad_version"] == 6
    chain = next(c for c in verdict["checks"] if c["name"] == "chain")
    assert chain["version"] == 6 and problem in chain["detail"]


def test_records_that_are_not_objects_are_invalid_not_errors() -> None:
    for records in ([], [None], ["x", 1], [[1, 2, 3]]):
        verdict = audit_records(records)
        assert verdict["valid"] is False and verdict["first_bad_version"] == 1


def test_every_flipped_bit_of_an_exported_line_is_caught_at_its_version(
    finished: tuple[Game, Records],
) -> None:
    records = finished[1][:14]
    header = {"format": "cantstop-game", "format_version": 1, "game_id": "g"}
    lines = [json.dumps(x, ensure_ascii=False).encode() for x in [header, *records]]
    version = 9
    target = lines[version]
    for position in range(len(target)):
        for bit in (0x01, 0x80):
            flipped = bytearray(target)
            flipped[position] ^= bit
            text = b"\n".join([*lines[:version], bytes(flipped), *lines[version + 1 :]])
            verdict = audit_records(parse_export(text)[1])
            assert verdict["first_bad_version"] == version, (position, bit, bytes(flipped))


# ------------------------------------------------------------------------------ tampering
TAMPERS = ["changed_die", "changed_timestamp", "flipped_byte", "deleted_event", "swapped_events"]
# In the manual game of play_manual: version 6 is the second turn's DiceRolled.
TARGET = 6


def _tamper_rows(rows: StoredRows, game_id: str, kind: str) -> None:
    if kind == "changed_die":

        def change_die(body: dict[str, Any]) -> None:
            body["dice"][0] = body["dice"][0] % 6 + 1

        rows.edit(game_id, TARGET, change_die)
    elif kind == "changed_timestamp":

        def change_time(body: dict[str, Any]) -> None:
            stamp = body["timestamp"]["_data_"]
            body["timestamp"]["_data_"] = stamp.replace(stamp[:4], str(int(stamp[:4]) - 1), 1)

        rows.edit(game_id, TARGET, change_time)
    elif kind == "flipped_byte":
        topic, state = rows.read(game_id, TARGET)
        flipped = bytearray(state)
        flipped[len(flipped) // 2] ^= 0x01
        rows.write(game_id, TARGET, topic, bytes(flipped))
    elif kind == "deleted_event":
        rows.delete(game_id, TARGET)
    else:
        one, two = rows.read(game_id, TARGET), rows.read(game_id, TARGET + 1)
        rows.write(game_id, TARGET, *two)
        rows.write(game_id, TARGET + 1, *one)


def _tamper_lines(lines: list[bytes], kind: str) -> list[bytes]:
    lines = list(lines)
    if kind == "deleted_event":
        del lines[TARGET]
        return lines
    if kind == "swapped_events":
        lines[TARGET], lines[TARGET + 1] = lines[TARGET + 1], lines[TARGET]
        return lines
    if kind == "flipped_byte":
        flipped = bytearray(lines[TARGET])
        flipped[len(flipped) // 2] ^= 0x01
        lines[TARGET] = bytes(flipped)
        return lines
    record = json.loads(lines[TARGET])
    if kind == "changed_die":
        record["data"]["dice"][0] = record["data"]["dice"][0] % 6 + 1
    else:
        record["at"] = record["at"].replace(record["at"][:4], str(int(record["at"][:4]) - 1), 1)
    lines[TARGET] = json.dumps(record).encode()
    return lines


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("kind", TAMPERS)
def test_tampering_with_a_stored_event_is_caught_at_its_version(
    kind: str,
    client: FlaskClient,
    app: Flask,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    game_id, _ = play_manual(client)
    assert ok(client.get(f"/v1/games/{game_id}/audit"))["valid"] is True
    exported = export_text(client, game_id).encode().split(b"\n")

    _tamper_rows(StoredRows(app, database_url), game_id, kind)
    verdict = ok(client.get(f"/v1/games/{game_id}/audit"))
    assert verdict["valid"] is False
    assert verdict["first_bad_version"] == TARGET
    assert failing(verdict)["chain"] == TARGET

    # A fresh process (no cached aggregate) answers the same, and never with a 500.
    fresh = create_app(Settings(database_url=database_url))
    try:
        again = ok(fresh.test_client().get(f"/v1/games/{game_id}/audit"))
    finally:
        fresh.extensions["cantstop"].close()
    assert again["valid"] is False and again["first_bad_version"] == TARGET

    # The same tampering in an exported file, audited offline.
    path = tmp_path / "tampered.ndjson"
    path.write_bytes(b"\n".join(_tamper_lines(exported, kind)))
    status, out, err = run_cli(["audit", str(path)], capsys)
    assert (status, err) == (1, "")
    offline = json.loads(out)
    assert offline["valid"] is False and offline["first_bad_version"] == TARGET


def test_a_stored_row_that_cannot_be_decoded_is_reported_and_export_marks_it(
    client: FlaskClient, app: Flask, database_url: str
) -> None:
    game_id, _ = play_manual(client)
    rows = StoredRows(app, database_url)
    topic, _ = rows.read(game_id, 4)
    rows.write(game_id, 4, topic, b"\xff not json")
    verdict = ok(client.get(f"/v1/games/{game_id}/audit"))
    assert verdict["first_bad_version"] == 4
    chain = next(c for c in verdict["checks"] if c["name"] == "chain")
    assert "unreadable" in chain["detail"]
    lines = export_text(client, game_id).splitlines()
    assert json.loads(lines[4])["version"] == 4 and "unreadable" in json.loads(lines[4])


# ------------------------------------------------------------------------------ offline CLI
def test_an_untampered_finished_server_dice_game_verifies_end_to_end_offline(
    client: FlaskClient,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    created = ok(client.post("/v1/games", json={"players": ["Ann", "Bob"]}), 201)
    game_id = created["game"]["id"]
    tokens = [s["token"] for s in created["seats"]]
    state = created["game"]
    for _ in range(3000):
        if state["status"] == "finished":
            break
        response = client.post(
            f"/v1/games/{game_id}/actions",
            json=choose(state),
            headers=bearer(tokens[state["turn"]["player"]]),
        )
        state = ok(response)["game"]
    assert state["status"] == "finished" and state["fairness"]["server_seed"]

    served = ok(client.get(f"/v1/games/{game_id}/audit"))
    assert served["valid"] is True, served
    # A fresh process loads the live game from its snapshots: the replay still ends there.
    fresh = create_app(Settings(database_url=database_url))
    try:
        assert ok(fresh.test_client().get(f"/v1/games/{game_id}/audit"))["valid"] is True
    finally:
        fresh.extensions["cantstop"].close()
    path = tmp_path / "game.ndjson"
    path.write_text(export_text(client, game_id), encoding="utf-8")
    status, out, err = run_cli(["audit", str(path)], capsys)
    assert (status, err) == (0, "")
    offline = json.loads(out)
    assert offline["valid"] is True
    # The same checks, but for the stored snapshots, which only the server holds.
    assert [c["name"] for c in offline["checks"]] + ["snapshots"] == [
        c["name"] for c in served["checks"]
    ]
    dice = next(c for c in offline["checks"] if c["name"] == "dice")
    assert "match the revealed seed" in dice["detail"]

    # The auditors' standard-library script agrees, and catches a changed die even when the
    # forger recomputes the whole chain (the draw no longer matches the revealed seed).
    assert run_script(path) == (0, "OK")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines[1:]]
    index = first(records, "DiceRolled", after=20)
    records[index]["data"]["dice"][0] = records[index]["data"]["dice"][0] % 6 + 1
    naive = [lines[0], *(json.dumps(r) for r in records)]
    path.write_text("\n".join(naive) + "\n", encoding="utf-8")
    assert run_script(path) == (1, f"FAIL at version {index + 1}")
    forged = [lines[0], *(json.dumps(r) for r in rehash(records))]
    path.write_text("\n".join(forged) + "\n", encoding="utf-8")
    assert run_script(path) == (1, f"FAIL at version {index + 1}")
    # Dated back, the chain recomputed: the script finds it too.
    records = [json.loads(line) for line in lines[1:]]
    records[index]["at"] = "2000-01-01T00:00:00.000000Z"
    forged = [lines[0], *(json.dumps(r) for r in rehash(records))]
    path.write_text("\n".join(forged) + "\n", encoding="utf-8")
    assert run_script(path) == (1, f"FAIL at version {index + 1}")


def run_script(export: Path) -> tuple[int, str]:
    """docs/verify_export.py in its own interpreter: exit status and the first word(s) printed."""
    done = subprocess.run(
        [sys.executable, str(VERIFY_SCRIPT), str(export)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    return done.returncode, last.split(":")[0]


def test_cantstop_audit_reads_standard_input(
    finished: tuple[Game, Records],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    header = {"format": "cantstop-game", "format_version": 1, "game_id": "g"}
    text = "".join(json.dumps(x) + "\n" for x in [header, *finished[1]])
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    status, out, _ = run_cli(["audit", "-"], capsys)
    assert status == 0 and json.loads(out)["valid"] is True


def test_cantstop_audit_reads_an_export_saved_with_a_byte_order_mark(
    finished: tuple[Game, Records], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = {"format": "cantstop-game", "format_version": 1, "game_id": "g"}
    text = "".join(json.dumps(x) + "\n" for x in [header, *finished[1]])
    path = tmp_path / "saved-by-an-editor.ndjson"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    status, out, _ = run_cli(["audit", str(path)], capsys)
    assert status == 0 and json.loads(out)["valid"] is True


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        (b"", "empty"),
        (b"not json\n", "not a JSON header"),
        (b'{"format": "something-else", "format_version": 1, "game_id": "g"}\n', "first line"),
        (b'{"format": "cantstop-game", "format_version": true, "game_id": "g"}\n', "first line"),
        (b'{"format": "cantstop-game", "format_version": 1, "game_id": "\\ud800"}\n', "surrogate"),
    ],
)
def test_cantstop_audit_exits_2_on_what_is_not_an_export(
    content: bytes | None,
    reason: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "input.ndjson"
    if content is not None:
        path.write_bytes(content)
    status, out, err = run_cli(["audit", str(path)], capsys)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and reason in err
    assert "Traceback" not in err
