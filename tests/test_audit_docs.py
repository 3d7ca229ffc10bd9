"""docs/auditing.md stays true: its embedded script is docs/verify_export.py, its worked examples
compute, and the script judges exports as the doc says (exit 0 OK, 1 a bad version, 2 unreadable).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from domain import fairness
from domain.commands import NewGame
from domain.game import ZERO_HASH, Game, chain_hash, event_records
from domain.transcript import apply_action

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOC = (DOCS / "auditing.md").read_text(encoding="utf-8")
SCRIPT = DOCS / "verify_export.py"
EXAMPLE_SEED = hashlib.sha256(b"an example seed").hexdigest()


def run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_script_in_the_doc_is_docs_verify_export_py() -> None:
    block = re.search(
        r"<!-- verify_export.py: begin -->\n```python\n(.*?)```\n<!-- verify_export.py: end -->",
        DOC,
        re.DOTALL,
    )
    assert block is not None
    assert block.group(1) == SCRIPT.read_text(encoding="utf-8")


def test_the_script_uses_the_standard_library_only() -> None:
    imports = re.findall(r"^(?:import|from) (\w+)", SCRIPT.read_text(encoding="utf-8"), re.M)
    assert set(imports) <= {"hashlib", "hmac", "json", "re", "sys"}


def test_the_worked_examples_compute() -> None:
    commitment = fairness.commitment(EXAMPLE_SEED)
    assert f"server_seed     = {EXAMPLE_SEED}" in DOC
    assert f"seed_commitment = {commitment}" in DOC
    digest = hmac.new(EXAMPLE_SEED.encode(), b"example-game:6:0", hashlib.sha256).hexdigest()
    assert f"= {digest}" in DOC
    assert fairness.draw(EXAMPLE_SEED, "example-game", 6, 4, 6) == [5, 4, 4, 1]
    assert "so the roll is `[5, 4, 4, 1]`" in DOC
    canonical = re.search(r'^    (\{"at":"2026-11-20T12:00:00\.000000Z".*\})$', DOC, re.M)
    assert canonical is not None
    body = json.loads(canonical.group(1))
    assert body["data"]["seed_commitment"] == commitment
    digest = chain_hash(ZERO_HASH, 1, body["type"], body["at"], body["data"])
    assert f"gives `hash = {digest}`" in DOC


def test_the_entropy_worked_example_computes() -> None:
    message = b"example-game:6:0:ann-says-7731"
    digest = hmac.new(EXAMPLE_SEED.encode(), message, hashlib.sha256).hexdigest()
    assert f"= {digest}" in DOC
    dice = fairness.draw(EXAMPLE_SEED, "example-game", 6, 4, 6, "ann-says-7731")
    assert dice == [4, 2, 2, 4] and "so the roll is `[4, 2, 2, 4]`" in DOC


def test_the_script_checks_a_manual_game_chain_and_refuses_what_is_not_an_export(
    tmp_path: Path,
) -> None:
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    for action in (
        {"type": "roll", "dice": [3, 4, 2, 6]},
        {"type": "move", "sums": [7, 8]},
        {"type": "stop"},
    ):
        apply_action(game, action)
    header = {"format": "cantstop-game", "format_version": 1, "game_id": str(game.id)}
    lines = [json.dumps(x) for x in [header, *event_records(game.collect_events())]]
    path = tmp_path / "manual.ndjson"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run(path)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK")

    path.write_text("\n".join([lines[0], lines[1], lines[3], lines[4]]) + "\n", encoding="utf-8")
    done = run(path)
    assert done.returncode == 1 and done.stdout.startswith("FAIL at version 2")

    for text in ("", "not json\n", '{"format": "other"}\n'):
        path.write_text(text, encoding="utf-8")
        done = run(path)
        assert done.returncode == 2 and "Traceback" not in done.stderr
    assert run(tmp_path / "missing.ndjson").returncode == 2


def test_the_script_refuses_dice_faces_no_byte_can_draw_without_hanging_or_crashing(
    tmp_path: Path,
) -> None:
    """A forger's export may state any ``dice_faces``, its chain and commitment recomputed: 300
    faces drew for ever (no byte is below 256 - 256 % 300 = 0), 0 raised ZeroDivisionError.
    Like the audit (domain.fairness.draw), the script draws dice of 2 to 256 faces only, and
    fails anything else at version 1."""
    game_id = uuid.uuid4()
    draw = functools.partial(fairness.draw, EXAMPLE_SEED, str(game_id))
    game = Game.start(game_id, NewGame(players=["Ann", "Bob"]), server_seed=EXAMPLE_SEED, draw=draw)
    assert game.current is not None
    game.roll(game.current, draw=draw)
    game.resign(1)
    game.reveal_seed(EXAMPLE_SEED)
    records = event_records(game.collect_events())
    header = {"format": "cantstop-game", "format_version": 1, "game_id": str(game_id)}
    path = tmp_path / "forged.ndjson"

    def judged(faces: object) -> subprocess.CompletedProcess[str]:
        forged = json.loads(json.dumps(records))
        forged[0]["data"]["rules"]["dice_faces"] = faces
        previous = ZERO_HASH
        for record in forged:
            record["prev_hash"] = previous
            record["hash"] = previous = chain_hash(
                previous, record["version"], record["type"], record["at"], record["data"]
            )
        lines = [json.dumps(x) for x in [header, *forged]]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return run(path)

    done = judged(6)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done
    for faces in (300, 257, 0, 1, -6, True, 6.0, "6"):
        done = judged(faces)
        assert done.returncode == 1, (faces, done)
        assert done.stdout.startswith("FAIL at version 1: rules.dice_faces"), (faces, done.stdout)
        assert "Traceback" not in done.stderr
