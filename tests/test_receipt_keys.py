"""A keys file is the auditor's to bring, so its every field may be anything: ``cantstop audit
--receipt`` judges a key whose ``key_id`` is not text (a list, an object: unhashable) as a
failed ``receipt`` check, as it does a key stated under another id (docs/api-contract.md,
Receipts), never with a traceback."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from domain.commands import NewGame
from domain.game import Game, event_records
from domain.receipts import b64url, message
from domain.transcript import apply_action
from service import cli
from service.application.games.receipts import Key, key_id_of, verify

Json = dict[str, Any]


def signed_export(tmp_path: Path) -> tuple[Path, Json, Json]:
    """An export of a short manual game, a receipt of its last event, and the keys (GET
    /v1/keys's shape) that verify it."""
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    apply_action(game, {"type": "roll", "dice": [3, 4, 2, 6]})
    records = event_records(game.collect_events())
    header = {"format": "cantstop-game", "format_version": 1, "game_id": str(game.id)}
    export = tmp_path / "game.ndjson"
    export.write_text("".join(json.dumps(x) + "\n" for x in [header, *records]))
    private = Ed25519PrivateKey.generate()
    key = Key(key_id_of(private.public_key()), private, "2026-01-01T00:00:00.000000Z", None)
    last = records[-1]
    signed = message(str(game.id), last["version"], last["hash"], last["at"])
    receipt = {
        "game_id": str(game.id),
        "version": last["version"],
        "hash": last["hash"],
        "at": last["at"],
        "key_id": key.key_id,
        "signature": b64url(private.sign(signed)),
    }
    return export, receipt, {"keys": [key.public_json()]}


@pytest.mark.parametrize("stated", [["x"], {"x": 1}, None, 7])
@pytest.mark.parametrize("alg", ["RSA", "Ed25519"])
def test_a_key_whose_id_is_not_text_fails_the_receipt_check_without_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stated: Any, alg: str
) -> None:
    export, receipt, keys = signed_export(tmp_path)
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    argv = ["audit", "--receipt", str(tmp_path / "receipt.json")]
    argv += ["--keys", str(tmp_path / "keys.json"), str(export)]
    assert cli.main(argv) == 0  # the right keys: valid
    capsys.readouterr()

    odd = {**keys["keys"][0], "alg": alg, "key_id": stated}
    bad = {"keys": [odd, *keys["keys"]]}
    problem = verify(receipt, bad)
    assert problem is not None and repr(stated) in problem
    (tmp_path / "keys.json").write_text(json.dumps(bad))
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert (status, err) == (1, "")  # invalid, with its verdict; a crash exits 1 too, unprinted
    check = next(c for c in json.loads(out)["checks"] if c["name"] == "receipt")
    assert check["ok"] is False and repr(stated) in check["detail"]
