"""Signed receipts (contract 1.2): every action's answer carries one, verified with the
``cryptography`` library and the published keys; an export cut before a receipt's version, or
differing at it, or a receipt that does not verify, fails the offline audit's ``receipt`` check."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from flask import Flask
from flask.testing import FlaskClient

from domain.game import format_at
from domain.receipts import b64url, message, unb64url
from service.application.games.receipts import Key, Receipts, key_id_of
from service.config import Settings
from service.http.app import create_app
from tests.support.games import create_game
from tests.support.http import bearer

Json = dict[str, Any]


def key_file(path: Path, *entries: tuple[Ed25519PrivateKey, str | None]) -> Path:
    document = {
        "keys": [
            {
                "private_key": b64url(key.private_bytes_raw()),
                "not_before": f"2026-0{i + 1}-01T00:00:00.000000Z",
                "not_after": retired,
            }
            for i, (key, retired) in enumerate(entries)
        ]
    }
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def keyed(database_url: str, tmp_path: Path) -> Iterator[tuple[Flask, Ed25519PrivateKey, Path]]:
    key = Ed25519PrivateKey.generate()
    keys = key_file(tmp_path / "keys.json", (key, None))
    settings = Settings(database_url=database_url, extra_env={"CANTSTOP_RECEIPT_KEYS": str(keys)})
    app = create_app(settings, create_tables=True)
    yield app, key, keys
    app.extensions["cantstop"].close()


def act(client: FlaskClient, game_id: str, token: str, action: Json) -> Json:
    reply = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
    assert reply.status_code == 200, reply.get_json()
    body: Json = reply.get_json()
    return body


def test_every_action_carries_a_receipt_that_the_library_verifies(
    keyed: tuple[Flask, Ed25519PrivateKey, Path],
) -> None:
    app, key, _ = keyed
    client = app.test_client()
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    state = client.get(f"/v1/games/{game_id}").get_json()
    answer = act(client, game_id, tokens[state["turn"]["player"]], {"type": "roll"})
    receipt = answer["receipt"]
    last = answer["events"][-1]
    assert (receipt["game_id"], receipt["version"], receipt["hash"], receipt["at"]) == (
        game_id,
        last["version"],
        last["hash"],
        last["at"],
    )
    published = client.get("/v1/keys").get_json()["keys"]
    [entry] = [k for k in published if k["key_id"] == receipt["key_id"]]
    assert entry["alg"] == "Ed25519" and entry["not_after"] is None
    public = Ed25519PublicKey.from_public_bytes(unb64url(entry["public_key"]))
    signed = message(game_id, receipt["version"], receipt["hash"], receipt["at"])
    public.verify(unb64url(receipt["signature"]), signed)  # raises if it does not verify
    assert public.public_bytes_raw() == key.public_key().public_bytes_raw()
    current = client.get(f"/v1/games/{game_id}/receipt").get_json()
    assert current["version"] == answer["game"]["version"] and current["hash"] == last["hash"]


def test_a_receipt_is_signed_as_the_cryptography_library_signs_it() -> None:
    """libsodium signs (the cheaper signer): Ed25519 is deterministic, so its signature is
    the very bytes cryptography's would be, for any key and message."""
    for _ in range(20):
        key = Ed25519PrivateKey.generate()
        receipts = Receipts([Key(key_id_of(key.public_key()), key, "2026-01-01", None)])
        at = format_at(datetime.now(UTC))
        signed = receipts.sign("game", 7, "ab" * 32, at)
        assert unb64url(signed["signature"]) == key.sign(message("game", 7, "ab" * 32, at))


def test_b64url_is_the_standard_librarys_urlsafe_base64_unpadded() -> None:
    """``b64url`` (one call to binascii on every action's receipt) writes what
    ``base64.urlsafe_b64encode`` writes, less its padding, for every length and byte."""
    for size in range(70):
        for data in (os.urandom(size), b"\xff" * size, b"\xfb\xef" * size):
            expected = base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
            assert b64url(data) == expected
            assert unb64url(b64url(data)) == data


def test_a_rotated_key_still_verifies_old_receipts(database_url: str, tmp_path: Path) -> None:
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    path = key_file(tmp_path / "keys.json", (old, None))
    env = {"CANTSTOP_RECEIPT_KEYS": str(path)}
    first = create_app(Settings(database_url=database_url, extra_env=env), create_tables=True)
    client = first.test_client()
    game_id, _ = create_game(client, players=["Ann", "Bob"])
    before = client.get(f"/v1/games/{game_id}/receipt").get_json()
    first.extensions["cantstop"].close()
    retired = format_at(datetime.now(UTC))
    key_file(path, (old, retired), (new, None))  # the operator rotates
    second = create_app(Settings(database_url=database_url, extra_env=env))
    try:
        keys = second.test_client().get("/v1/keys").get_json()
        after = second.test_client().get(f"/v1/games/{game_id}/receipt").get_json()
        assert after["key_id"] != before["key_id"]
        assert {k["key_id"] for k in keys["keys"]} == {before["key_id"], after["key_id"]}
        from service.application.games.receipts import verify

        assert verify(before, keys) is None and verify(after, keys) is None
    finally:
        second.extensions["cantstop"].close()


def audit(tmp_path: Path, export: bytes, receipt: Json, keys: Json) -> tuple[int, Json]:
    (tmp_path / "game.ndjson").write_bytes(export)
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "audit",
            "--receipt",
            str(tmp_path / "receipt.json"),
            "--keys",
            str(tmp_path / "keys.json"),
            str(tmp_path / "game.ndjson"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    verdict: Json = json.loads(done.stdout) if done.stdout else {}
    return done.returncode, verdict


def receipt_check(verdict: Json) -> Json:
    found: Json = next(c for c in verdict["checks"] if c["name"] == "receipt")
    return found


def test_the_offline_audit_proves_a_cut_or_a_rewrite_with_a_receipt(
    keyed: tuple[Flask, Ed25519PrivateKey, Path], tmp_path: Path
) -> None:
    app, _, _ = keyed
    client = app.test_client()
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    for _ in range(3):
        state = client.get(f"/v1/games/{game_id}").get_json()
        answer = act(client, game_id, tokens[state["turn"]["player"]], {"type": "roll"})
        if answer["game"]["turn"]["phase"] == "move":
            legal = answer["game"]["legal_actions"][0]
            answer = act(client, game_id, tokens[state["turn"]["player"]], legal)
    receipt = answer["receipt"]
    keys = client.get("/v1/keys").get_json()
    export = client.get(f"/v1/games/{game_id}/export").get_data()
    status, verdict = audit(tmp_path, export, receipt, keys)
    assert status == 0 and receipt_check(verdict)["ok"], verdict

    # The store lost its last events: the export alone looks valid; the receipt shows the cut.
    cut = b"\n".join(export.split(b"\n")[: receipt["version"]]) + b"\n"
    status, verdict = audit(tmp_path, cut, receipt, keys)
    check = receipt_check(verdict)
    assert status == 1 and not check["ok"] and check["version"] == receipt["version"]
    assert "stops at version" in check["detail"]

    forged = dict(receipt, signature=b64url(b"\0" * 64))
    status, verdict = audit(tmp_path, export, forged, keys)
    assert status == 1 and "does not verify" in receipt_check(verdict)["detail"]
    unknown = dict(receipt, key_id="ed25519-0000000000000000")
    status, verdict = audit(tmp_path, export, unknown, keys)
    assert status == 1 and "not among the keys" in receipt_check(verdict)["detail"]
    other_game, _ = create_game(client, players=["Cy", "Dee"])
    elsewhere = client.get(f"/v1/games/{other_game}/export").get_data()
    status, verdict = audit(tmp_path, elsewhere, receipt, keys)
    assert status == 1 and "for game" in receipt_check(verdict)["detail"]
    status, verdict = audit(tmp_path, export, {"version": "x"}, keys)
    assert status == 1 and not receipt_check(verdict)["ok"]  # a verdict, never a crash
