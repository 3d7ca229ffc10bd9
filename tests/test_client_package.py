"""The client package (clients/python, ``cantstop_client``) against a real server: a whole game
against ``expert``, offline verification of its receipt and export (and of cut and edited
ones), retries through a real proxy that loses answers, refusals as exceptions, the game stream
resumed after a cut, and the package installed by pip into a fresh virtualenv.

The package is imported from its source (pytest's ``pythonpath``, pyproject.toml); one test
installs it the way a third party does. It must not import the service: a test says so.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cantstop_client import (
    ApiError,
    Client,
    GameState,
    LegalAction,
    Parser,
    Receipt,
    parse_export,
    verify_export,
    verify_receipt,
)
from cantstop_client.verify import event_hash

from tests.support.faults import Fault, FaultyProxy
from tests.support.http import HOST
from tests.support.servers import free_port, serving

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "python"

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``cantstop serve``, one worker, bots without pauses: its base URL."""
    tmp = tmp_path_factory.mktemp("client-package")
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_BOT_PAUSE": "0", "CANTSTOP_THREADS": "16"}
    with serving(tmp, *args, env=env, ready_port=port):
        yield f"http://{HOST}:{port}"


@pytest.fixture
def client(server: str) -> Iterator[Client]:
    with Client(server) as c:
        c.sign_up(handle(), "correct horse battery")
        yield c


def handle() -> str:
    return "t" + uuid.uuid4().hex[:12]


def choose(state: GameState) -> LegalAction:
    """A plain player: stop once three runners are out, else roll or take the first move."""
    legal = state["legal_actions"]
    turn = state["turn"]
    if {"type": "stop"} in legal and turn is not None and len(turn["runners"]) == 3:
        return {"type": "stop"}
    return next(a for a in legal if a["type"] != "stop")


def play_to_the_end(client: Client, game_id: str, seat: int) -> tuple[GameState, Receipt]:
    """Act whenever ``seat`` is to act (waiting on the game's stream, not polling)."""
    receipt: Receipt | None = None
    for _ in range(2000):
        state = client.wait_turn(game_id, seat, timeout=60)
        if state["status"] == "finished":
            assert receipt is not None
            return state, receipt
        receipt = client.act(game_id, choose(state), if_match=state["version"])["receipt"]
    raise AssertionError("the game did not end in 2000 actions")


@pytest.fixture(scope="module")
def finished(server: str) -> dict[str, Any]:
    """One whole game against expert, played through the client: its export, the receipt of
    the last action, and the keys, saved as a player would."""
    with Client(server) as c:
        me = handle()
        c.sign_up(me, "correct horse battery")
        created = c.create_game([{"account": me}, {"name": "expert", "bot": "expert"}])
        game_id = created["game"]["id"]
        assert created["game"]["players"][0]["account"] == me
        state, receipt = play_to_the_end(c, game_id, 0)
        return {
            "game_id": game_id,
            "state": state,
            "receipt": receipt,
            "keys": c.keys(),
            "export": c.export(game_id),
            "audit": c.audit(game_id),
        }


# ------------------------------------------------------------------------------ playing
def test_a_whole_game_against_expert(finished: dict[str, Any]) -> None:
    state = finished["state"]
    assert state["status"] == "finished"
    assert state["winner"] in (0, 1)
    assert state["fairness"]["server_seed"] is not None
    assert finished["audit"]["valid"], finished["audit"]


def test_the_receipt_and_export_verify_offline(finished: dict[str, Any]) -> None:
    receipt, keys, export = finished["receipt"], finished["keys"], finished["export"]
    verdict = verify_export(export, receipt=receipt, keys=keys)
    assert verdict["valid"], verdict
    assert [c["name"] for c in verdict["checks"]] == ["chain", "dice", "receipt"]
    assert "draws match the revealed seed" in verdict["checks"][1]["detail"]
    assert verify_receipt(receipt, keys)["ok"]
    assert parse_export(export).game_id == finished["game_id"]


def test_a_cut_or_edited_export_is_caught(finished: dict[str, Any]) -> None:
    receipt, keys = finished["receipt"], finished["keys"]
    lines = finished["export"].rstrip("\n").split("\n")
    version = receipt["version"]

    # Cut before the version the server acknowledged: the receipt check fails at it.
    cut = "\n".join(lines[:version]) + "\n"  # the header and versions 1 .. version-1
    verdict = verify_export(cut, receipt=receipt, keys=keys)
    assert not verdict["valid"]
    failed = {c["name"]: c for c in verdict["checks"] if not c["ok"]}
    assert "receipt" in failed and "stops at version" in failed["receipt"]["detail"]
    assert failed["receipt"]["version"] == version

    # A die edited in place: the hash chain breaks at that event.
    events = [json.loads(line) for line in lines[1:]]
    rolled = next(e for e in events if e["type"] == "DiceRolled")
    edited = copy.deepcopy(events)
    first_die = edited[rolled["version"] - 1]["data"]["dice"]
    first_die[0] = first_die[0] % 6 + 1
    verdict = verify_export(export_of(lines[0], edited), receipt=receipt, keys=keys)
    chain = verdict["checks"][0]
    assert not chain["ok"] and chain["version"] == rolled["version"]
    assert verdict["first_bad_version"] == rolled["version"]

    # The same edit with every hash recomputed (a forger's chain): the chain holds, but the
    # dice no longer match the seed, and the receipt no longer matches the export.
    rechain(edited)
    verdict = verify_export(export_of(lines[0], edited), receipt=receipt, keys=keys)
    by_name = {c["name"]: c for c in verdict["checks"]}
    assert by_name["chain"]["ok"]
    assert not by_name["dice"]["ok"] and by_name["dice"]["version"] == rolled["version"]
    assert not by_name["receipt"]["ok"] and "differs" in by_name["receipt"]["detail"]

    # A receipt whose signature was altered, or checked with other keys, does not verify.
    forged = dict(receipt, version=receipt["version"] - 1)
    assert "does not verify" in verify_receipt(forged, keys)["detail"]
    assert "not among the keys" in verify_receipt(receipt, {"keys": []})["detail"]


def export_of(header: str, events: list[dict[str, Any]]) -> str:
    return "\n".join([header, *(json.dumps(e, ensure_ascii=False) for e in events)]) + "\n"


def rechain(events: list[dict[str, Any]]) -> None:
    previous = "0" * 64
    for event in events:
        event["prev_hash"] = previous
        event["hash"] = event_hash(
            previous, event["version"], event["type"], event["at"], event["data"]
        )
        previous = event["hash"]


def test_refusals_are_raised_with_status_code_and_detail(client: Client) -> None:
    created = client.create_game(["Ann", "Bob"], dice="manual", first_player=0)
    game_id = created["game"]["id"]
    bob = created["seats"][1]["token"]
    with pytest.raises(ApiError) as refused:
        client.roll(game_id, dice=[1, 2, 3, 4], token=bob)
    assert (refused.value.status, refused.value.code) == (403, "not_your_turn")
    assert refused.value.detail
    ann = created["seats"][0]["token"]
    client.roll(game_id, dice=[1, 1, 2, 2], token=ann)  # sums 2, 3, 4
    with pytest.raises(ApiError) as illegal:
        client.move(game_id, [7, 7], token=ann)
    assert (illegal.value.status, illegal.value.code) == (409, "illegal_action")
    assert illegal.value.problem["legal_actions"]
    with pytest.raises(ApiError) as missing:
        client.game(str(uuid.uuid4()))
    assert (missing.value.status, missing.value.code) == (404, "not_found")


# ------------------------------------------------------------------------------ retries
def test_a_lost_answer_is_retried_with_the_same_key_and_acts_once(server: str) -> None:
    """The proxy lets the first attempt of a roll reach the server, which records it, and loses
    the answer; the client's second attempt carries the same Idempotency-Key and gets the first
    answer back: one roll recorded, not two. A 503 before the server is reached is retried too."""
    with FaultyProxy(int(server.rsplit(":", 1)[1])) as proxy, Client(proxy.url) as client:
        client.sign_up(handle(), "correct horse battery")
        created = client.create_game(["Ann", "Bob"], dice="manual", first_player=0)
        game_id, ann = created["game"]["id"], created["seats"][0]["token"]
        before = created["game"]["version"]

        proxy.arm(Fault("drop", lambda line: line.endswith(b"/actions HTTP/1.1")))
        result = client.roll(game_id, dice=[1, 1, 2, 2], token=ann)
        assert proxy.applied == ["drop"] and client.retries == 1
        recorded = client.events(game_id, after=before)
        assert recorded == result["events"]  # the one roll, answered from the first attempt
        assert [e["type"] for e in recorded] == ["DiceRolled"]
        assert client.game(game_id)["version"] == before + 1 == result["game"]["version"]

        proxy.arm(Fault("refuse", lambda line: line.endswith(b"/actions HTTP/1.1"), times=2))
        moved = client.move(game_id, [2, 4], token=ann)
        assert proxy.applied == ["drop", "refuse", "refuse"] and client.retries == 3
        assert moved["game"]["version"] == before + 2

        # The same key sent again by hand: the first answer, nothing recorded.
        key = "my-stop-1"
        stopped = client.stop(game_id, token=ann, idempotency_key=key)
        again = client.stop(game_id, token=ann, idempotency_key=key)
        assert again == stopped
        assert client.game(game_id)["version"] == stopped["game"]["version"] == before + 3


def test_a_create_whose_answer_is_lost_is_retried_and_made_once(server: str) -> None:
    """POST /v1/games carries an Idempotency-Key (the same on each attempt): after a lost
    answer the client sends it again and gets the first answer back, the game made once."""
    with FaultyProxy(int(server.rsplit(":", 1)[1])) as proxy, Client(proxy.url) as client:
        me = handle()
        client.sign_up(me, "correct horse battery")
        proxy.arm(Fault("drop", lambda line: line.startswith(b"POST /v1/games HTTP")))
        created = client.create_game([{"account": me}, "Bob"])
        assert proxy.applied == ["drop"] and client.retries == 1
        games = client.account_games(me)["games"]
        assert [g["game_id"] for g in games] == [created["game"]["id"]]  # made once
        # The tokens answered are the game's own.
        turn = client.game(created["game"]["id"])["turn"]
        assert turn is not None
        token = created["seats"][turn["player"]]["token"]
        assert client.roll(created["game"]["id"], token=token)["game"]["version"] > 0


def test_an_action_carries_if_match_with_the_version_the_client_last_saw(server: str) -> None:
    """Decided on version v, an action is refused (412, nothing recorded) when the game moved
    on meanwhile, unless the caller asks for no If-Match."""
    with Client(server) as ann_client, Client(server) as other:
        created = ann_client.create_game(["Ann", "Bob"], dice="manual", first_player=0)
        game_id, ann = created["game"]["id"], created["seats"][0]["token"]
        seen = ann_client.game(game_id)["version"]
        assert ann_client.seen_version(game_id) == seen
        other.roll(game_id, dice=[1, 1, 2, 2], token=ann)  # the game moves on elsewhere
        with pytest.raises(ApiError) as stale:
            ann_client.move(game_id, [2, 4], token=ann)
        assert (stale.value.status, stale.value.code) == (412, "version_conflict")
        assert other.game(game_id)["version"] == seen + 1  # nothing recorded
        moved = ann_client.move(game_id, [2, 4], token=ann, if_match=False)
        assert moved["game"]["version"] == seen + 2
        assert ann_client.seen_version(game_id) == seen + 2


# ------------------------------------------------------------------------------ streams
def test_the_game_stream_resumes_after_a_cut_with_nothing_lost_or_twice(server: str) -> None:
    with FaultyProxy(int(server.rsplit(":", 1)[1])) as proxy, Client(proxy.url) as client:
        created = client.create_game(["Ann", "Bob"], dice="manual", first_player=0)
        game_id, ann = created["game"]["id"], created["seats"][0]["token"]
        client.roll(game_id, dice=[1, 1, 2, 2], token=ann)
        client.move(game_id, [2, 4], token=ann)
        client.resign(game_id, token=ann)  # Bob wins: the game is finished
        last = client.game(game_id)["version"]
        proxy.arm(Fault("cut", lambda line: b"/stream" in line, times=2, events=2))
        stream = client.game_stream(game_id, after=0)
        versions = [event["version"] for event in stream]
        assert versions == list(range(1, last + 1))
        assert stream.connections == 3  # cut twice, then to the end
        assert proxy.applied == ["cut", "cut"]


def test_the_parser_reads_the_format_as_written() -> None:
    parser = Parser()
    lines = [
        "retry: 1500",
        ": keep-alive",
        "",
        "id: 7",
        "event: your_turn",
        'data: {"a":',
        "data:1}",
        "",
        "id: bad\0id",
        "data: x",
        "",
        "retry: soon",
    ]
    messages = [m for m in map(parser.feed, lines) if m is not None]
    assert [(m.event, m.data, m.id) for m in messages] == [
        ("your_turn", '{"a":\n1}', "7"),
        ("message", "x", "7"),  # an id holding NUL is ignored
    ]
    assert parser.retry_ms == 1500


# ------------------------------------------------------------------------------ packaging
def test_the_package_does_not_import_the_service() -> None:
    for path in (PACKAGE / "src" / "cantstop_client").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in ("domain", "service", "tests", "docs"), (path, name)


def test_pip_installs_the_subdirectory_into_a_fresh_virtualenv(
    tmp_path: Path, finished: dict[str, Any]
) -> None:
    """As a third party would: ``pip install ./clients/python`` (the machine's index and wheel
    cache, build isolation on), then the installed package verifies a saved game offline."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(PACKAGE)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    seconds = time.monotonic() - started
    assert installed.returncode == 0, installed.stdout + installed.stderr
    print(f"pip install ./clients/python: {seconds:.1f} s")
    (tmp_path / "game.ndjson").write_text(finished["export"], encoding="utf-8")
    (tmp_path / "receipt.json").write_text(json.dumps(finished["receipt"]), encoding="utf-8")
    (tmp_path / "keys.json").write_text(json.dumps(finished["keys"]), encoding="utf-8")
    script = (
        "import json, cantstop_client, pathlib\n"
        "p = pathlib.Path.cwd()\n"
        "v = cantstop_client.verify_export((p / 'game.ndjson').read_text(),\n"
        "    receipt=json.loads((p / 'receipt.json').read_text()),\n"
        "    keys=json.loads((p / 'keys.json').read_text()))\n"
        "print(cantstop_client.__file__, v['valid'])\n"
    )
    ran = subprocess.run(
        [str(python), "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    where, valid = ran.stdout.split()
    assert str(venv) in where and valid == "True"
    typed = list(venv.glob("lib/python*/site-packages/cantstop_client/py.typed"))
    assert typed, "py.typed is installed with the package"


def test_the_readme_tour_runs_as_written(server: str, tmp_path: Path) -> None:
    """clients/python/README.md's tour, its first Python block exactly, against the server."""
    readme = (PACKAGE / "README.md").read_text(encoding="utf-8")
    tour = readme.split("```python\n", 1)[1].split("```", 1)[0]
    env = dict(os.environ, CANTSTOP_URL=server, PYTHONPATH=str(PACKAGE / "src"))
    ran = subprocess.run(
        [sys.executable, "-c", tour],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] in ("finished: won", "finished: lost"), ran.stdout
    assert lines[1] == "valid: True ['chain', 'dice', 'receipt']"
    assert lines[2] == "409 game_over"
