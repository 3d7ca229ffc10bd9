"""The reference bot (clients/python/examples/reference_bot.py) against a real server: two of
them, two bot accounts, play each other through the account stream (one challenges, the other
accepts) with no polling; one catches up on a game where it was to act before it connected;
and its Rule-of-28 strategy, read over the JSON state, plays legal moves to the end.

The bots run as the programs a bot author runs: subprocesses, with the client package on
their path. "No polling" is measured in the server's access log: one read of the game per
turn the bot is told about, however long the opponent thinks.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cantstop_client import Client, GameState

from tests.support.http import HOST
from tests.support.servers import free_port, serving

ROOT = Path(__file__).resolve().parent.parent
BOT = ROOT / "clients" / "python" / "examples" / "reference_bot.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``cantstop serve`` with its access log in a file: its URL and the log."""
    tmp = tmp_path_factory.mktemp("reference-bot")
    port = free_port()
    log = tmp / "access.log"
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_BOT_PAUSE": "0", "CANTSTOP_THREADS": "16", "CANTSTOP_ACCESS_LOG": str(log)}
    with serving(tmp, *args, env=env, ready_port=port):
        yield f"http://{HOST}:{port}", log


def bot_account(url: str) -> tuple[str, str]:
    """A new bot account: its handle and token."""
    handle = "b" + uuid.uuid4().hex[:10]
    with Client(url) as client:
        return handle, client.sign_up(handle, bot=True)["token"]


def start_bot(url: str, token: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "clients" / "python" / "src"))
    return subprocess.Popen(
        [sys.executable, str(BOT), "--url", url, "--token", token, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(bot: subprocess.Popen[str], timeout: float = 180) -> str:
    """The bot's output once it exits by itself (``--games``); fails if it does not in time."""
    try:
        output, _ = bot.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        bot.kill()
        output, _ = bot.communicate()
        raise AssertionError(f"the bot did not finish:\n{output}") from None
    assert bot.returncode == 0, output
    return output


def turns_of(client: Client, game_id: str) -> int:
    ends = {"TurnStopped", "TurnBusted", "TurnTimedOut", "PlayerResigned"}
    return sum(1 for e in client.events(game_id) if e["type"] in ends)


def reads_of(log: Path, game_id: str) -> int:
    return len(re.findall(rf'"GET /v1/games/{game_id} HTTP', log.read_text()))


def test_two_reference_bots_play_each_other_through_the_account_stream(
    server: tuple[str, Path],
) -> None:
    url, log = server
    alpha, alpha_token = bot_account(url)
    beta, beta_token = bot_account(url)
    beta_bot = start_bot(url, beta_token, "--games", "1")
    alpha_bot = start_bot(url, alpha_token, "--games", "1", "--challenge", beta)
    alpha_out, beta_out = finish(alpha_bot), finish(beta_bot)
    assert f"challenged {beta}" in alpha_out
    assert "accepted" in beta_out and f"{alpha}'s challenge" in beta_out
    with Client(url) as client:
        games = client.account_games(alpha)["games"]
        assert len(games) == 1 and games[0]["status"] == "finished"
        game_id = games[0]["game_id"]
        state = client.game(game_id)
        assert {p.get("account") for p in state["players"]} == {alpha, beta}
        assert state["winner"] is not None and state["finish_reason"] == "columns"
        assert client.audit(game_id)["valid"]
        # Each bot reads the game once when told it is its turn, and acts on the answers:
        # at most one read per turn (and one per catch-up), never a polling loop.
        assert reads_of(log, game_id) <= turns_of(client, game_id) + 2
    won = "won" in alpha_out.split(game_id)[-1]
    assert won != ("won" in beta_out.split(game_id)[-1])  # one winner, one loser


def test_two_reference_bots_seeking_are_paired_and_play(server: tuple[str, Path]) -> None:
    """Rated, as ``--rated`` asks: a rated game needs a clock (contract 1.3), 60 s a turn."""
    url, _ = server
    first, first_token = bot_account(url)
    second, second_token = bot_account(url)
    bots = [
        start_bot(url, token, "--games", "1", "--seek", "--rated")
        for token in (first_token, second_token)
    ]
    outputs = [finish(bot) for bot in bots]
    with Client(url) as client:
        games = client.account_games(first)["games"]
        assert len(games) == 1 and games[0]["status"] == "finished"
        state = client.game(games[0]["game_id"])
        assert {p.get("account") for p in state["players"]} == {first, second}
        assert state["rated"] is True and state["clock"] == {"turn_seconds": 60}
    for output in outputs:
        assert "seeking a game" in output and f"game {games[0]['game_id']} finished" in output


def test_the_bot_catches_up_on_a_game_where_it_is_to_act(server: tuple[str, Path]) -> None:
    """A game against expert made with the bot account's token before the bot runs: the bot
    learns of it by its catch-up on connecting, then plays it to the end by the stream."""
    url, _ = server
    handle, token = bot_account(url)
    with Client(url, token) as client:
        created = client.create_game([{"account": handle}, {"name": "expert", "bot": "expert"}])
        game_id = created["game"]["id"]
        state = client.wait_turn(game_id, 0, timeout=60)  # expert may open: wait for ours
        assert state["status"] == "in_progress"
        output = finish(start_bot(url, token, "--games", "1"))
        assert f"game {game_id} finished" in output
        assert client.game(game_id)["status"] == "finished"


# ------------------------------------------------------------------------------ strategy
def reference_bot() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_bot", BOT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_strategy_plays_only_legal_actions_to_the_end(server: tuple[str, Path]) -> None:
    url, _ = server
    bot = reference_bot()
    with Client(url) as client:
        me = "s" + uuid.uuid4().hex[:10]
        client.sign_up(me, "correct horse battery")
        created = client.create_game([{"account": me}, {"name": "expert", "bot": "expert"}])
        game_id = created["game"]["id"]
        for _ in range(2000):
            state = client.wait_turn(game_id, 0, timeout=60)
            if state["status"] == "finished":
                break
            action = bot.choose(state, 0)
            assert action in state["legal_actions"]
            client.act(game_id, action)
        assert client.game(game_id)["status"] == "finished"


def position(runners: dict[str, int], **changes: Any) -> GameState:
    """A two-player state at seat 0's turn, phase roll_or_stop, with these runners."""
    state: dict[str, Any] = {
        "id": "g",
        "version": 9,
        "status": "in_progress",
        "rules": {"columns_to_win": 3, "dice_faces": 6},
        "dice": "server",
        "columns": [
            {"column": c, "height": 13 - 2 * abs(7 - c), "claimed_by": None} for c in range(2, 13)
        ],
        "players": [
            {"seat": 0, "name": "a", "markers": {}, "claimed": [], "resigned": False},
            {"seat": 1, "name": "b", "markers": {}, "claimed": [], "resigned": False},
        ],
        "turn": {
            "number": 3,
            "player": 0,
            "phase": "roll_or_stop",
            "dice": None,
            "runners": runners,
        },
        "legal_actions": [{"type": "roll"}, {"type": "stop"}],
        "winner": None,
        "solitaire": None,
        "fairness": {"seed_commitment": None, "client_seed": None, "server_seed": None},
    }
    state.update(changes)
    return state  # type: ignore[return-value]


def test_the_rule_of_28_decides_as_published() -> None:
    bot = reference_bot()
    # 7 up 2 (1·3) and 8 up 1 (2·2): 7 points, far below 28: roll.
    assert bot.choose(position({"7": 2, "8": 1}), 0) == {"type": "roll"}
    # 2 up 3 and 12 up 3 (6·4 each = 48): stop.
    assert bot.choose(position({"2": 3, "12": 3}), 0) == {"type": "stop"}
    # Two columns claimed, and a runner at the top of a third: stopping wins, stop.
    players = position({})["players"]
    players[0]["claimed"] = [4, 10]
    assert bot.choose(position({"7": 13}, players=players), 0) == {"type": "stop"}
    # A forced roll (no stop listed) is a roll; moves prefer the middle and existing runners.
    assert bot.choose(position({"2": 3}, legal_actions=[{"type": "roll"}]), 0) == {"type": "roll"}
    moves = [{"type": "move", "sums": [2, 12]}, {"type": "move", "sums": [6, 8]}]
    assert bot.choose(position({}, legal_actions=moves), 0) == moves[1]
    moves = [{"type": "move", "sums": [7]}, {"type": "move", "sums": [9]}]
    assert bot.choose(position({"9": 1, "5": 1, "4": 1}, legal_actions=moves), 0) == moves[1]


def test_reference_bots_play_a_whole_tournament(server: tuple[str, Path]) -> None:
    """Three bots given ``--tournament``: each registers, plays every table it is seated at
    (a Swiss of 2 rounds at tables of 2: one bye a round) and stops when it finishes."""
    url, _ = server
    with Client(url) as organizer:
        organizer.sign_up("o" + uuid.uuid4().hex[:10], "correct horse battery")
        tournament = organizer.create_tournament(
            "bots' evening",
            "swiss",
            players_per_table=2,
            rounds=2,
            clock={"turn_seconds": 60},
            rules={"columns_to_win": 1},
        )
        tid = tournament["id"]
        accounts = [bot_account(url) for _ in range(3)]
        bots = [start_bot(url, token, "--tournament", tid) for _, token in accounts]
        for _ in range(600):  # each bot registers once its stream is open
            if len(organizer.tournament(tid)["players"]) == 3:
                break
            for bot in bots:
                assert bot.poll() is None, finish(bot)
            time.sleep(0.1)  # bounded: 600 looks
        assert sorted(organizer.tournament(tid)["players"]) == sorted(h for h, _ in accounts)
        organizer.start_tournament(tid)
        outputs = [finish(bot) for bot in bots]
        final = organizer.tournament(tid)
    assert final["status"] == "finished" and final["finish_reason"] == "completed"
    assert [len(r["tables"]) for r in final["rounds"]] == [1, 1]
    assert all(t["result"] is not None for r in final["rounds"] for t in r["tables"])
    for output in outputs:
        assert f"registered in tournament {tid}" in output
        assert f"tournament {tid} finished: rank" in output, output
