"""`cantstop sheet FILE`: the record sheet from an exported game, offline."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from flask.testing import FlaskClient
from pypdf import PdfReader


def export_of_a_short_solitaire(client: FlaskClient) -> bytes:
    body = {"players": ["Sol"], "rules": {"solitaire": "advanced"}, "dice": "manual"}
    created = client.post("/v1/games", json=body).get_json()
    gid, token = created["game"]["id"], created["seats"][0]["token"]
    for action in (
        {"type": "roll", "dice": [1, 3, 2, 3]},
        {"type": "move", "sums": [4, 5]},
        {"type": "stop"},
        {"type": "roll", "dice": [1, 3, 2, 3]},
        {"type": "move", "sums": [4, 5]},
        {"type": "roll", "dice": [6, 6, 6, 6]},
        {"type": "move", "sums": [12, 12]},
        {"type": "roll", "dice": [1, 1, 1, 1]},  # bust: the markers on 4 and 5 are wiped
    ):
        response = client.post(
            f"/v1/games/{gid}/actions", json=action, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200, response.get_json()
    export = client.get(f"/v1/games/{gid}/export")
    assert export.status_code == 200
    data: bytes = export.data  # werkzeug's Response.data is a property(): Any to mypy
    return data


def sheet(path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "service.cli", "sheet", str(path), *args]
    return subprocess.run(command, capture_output=True, timeout=60, check=False)


def test_sheet_from_an_export_in_text_csv_and_pdf(client: FlaskClient, tmp_path: Path) -> None:
    path = tmp_path / "game.ndjson"
    path.write_bytes(export_of_a_short_solitaire(client))

    text = sheet(path)
    assert text.returncode == 0, text.stderr
    assert text.stdout.decode().splitlines()[1:] == ["1. 4×1, 5×1", "2. S – 4,5"]

    csv = sheet(path, "--format", "csv").stdout.decode().splitlines()
    assert csv[0] == "turn,result,progress,wiped,captured,claimed_total"
    assert csv[2].startswith("2,bust,")

    pdf = sheet(path, "--format", "pdf").stdout
    extracted = "".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    assert "4×1, 5×1" in extracted and "S – 4,5" in extracted


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "junk.ndjson"
    path.write_text("not an export\n")
    result = sheet(path)
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr
    assert sheet(tmp_path / "absent.ndjson").returncode == 2


def test_an_export_that_does_not_verify_gets_no_sheet_and_no_traceback(
    client: FlaskClient, tmp_path: Path
) -> None:
    """Forged or damaged rows could say anything: a stop's progress as a list, a winner or a
    seat past the players, a line that is no object. Each once ended in a traceback."""
    lines = export_of_a_short_solitaire(client).decode().splitlines()
    stop = next(i for i, line in enumerate(lines) if '"TurnStopped"' in line)

    def with_line(index: int, change: object) -> list[str]:
        record = json.loads(lines[index])
        if callable(change):
            change(record)
            return [*lines[:index], json.dumps(record), *lines[index + 1 :]]
        return [*lines[:index], json.dumps(change), *lines[index + 1 :]]

    forgeries = {
        "not an object": with_line(stop, 5),
        "progress as a list": with_line(stop, lambda r: r["data"].update(progress=[1])),
        "infinite faces": with_line(
            1, lambda r: r["data"]["rules"].update(dice_faces=float("inf"))
        ),
    }
    for name, forged in forgeries.items():
        path = tmp_path / "forged.ndjson"
        path.write_text("\n".join(forged) + "\n")
        result = sheet(path)
        assert result.returncode == 1, (name, result.stderr)
        assert b"does not verify" in result.stderr and b"Traceback" not in result.stderr, name
        assert result.stdout == b"", name


def test_a_multiplayer_export_needs_the_seat_as_the_api_does(
    client: FlaskClient, tmp_path: Path
) -> None:
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"})
    game_id = created.get_json()["game"]["id"]
    path = tmp_path / "pair.ndjson"
    path.write_bytes(client.get(f"/v1/games/{game_id}/export").data)
    unnamed = sheet(path)
    assert unnamed.returncode == 2 and b"--seat" in unnamed.stderr and unnamed.stdout == b""
    named = sheet(path, "--seat", "1")
    assert named.returncode == 0 and b"Bob" in named.stdout
