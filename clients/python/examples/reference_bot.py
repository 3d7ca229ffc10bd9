#!/usr/bin/env python3
"""A reference bot for the Can't Stop service: copy it, then change ``choose``.

It connects with a bot account's token, follows the account stream, accepts every challenge,
optionally seeks games, and plays every game in which it is told ``your_turn``, many at once,
over one stream connection and without polling. Its strategy is a Rule of 28 (Michael Keller's
heuristic, as Glenn & Aloi state it) over the JSON state the server sends.

    pip install ./clients/python                     # the client package, from this repository
    python clients/python/examples/reference_bot.py --sign-up robo   # prints a bot token, once
    export CANTSTOP_URL=http://127.0.0.1:8000 CANTSTOP_TOKEN=<that token>
    python clients/python/examples/reference_bot.py --seek           # play until Ctrl-C

Options: ``--challenge HANDLE`` challenges an account on start; ``--games N`` stops after N
games finished (for tests and trials); ``--tournament ID`` registers in that tournament (a
registration it holds already is fine), plays every table it is seated at (each is an ordinary
game of its account, announced by ``game_started`` and ``your_turn``) and stops once the
tournament is finished (it follows the tournament's own stream for that); ``--workers N``
games handled at once (default 4);
``--rated`` makes its seek and its challenge ask for rated games, which need a turn clock:
``--clock SECONDS`` (default 60; any game's clock with ``--clock`` alone).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from cantstop_client import ApiError, Client, GameState, LegalAction, Notice

# ------------------------------------------------------------------------------ the strategy
# Everything the bot decides is here: a function of the state the server sends (which holds
# the legal actions), so it never needs the service's code. Replace it with yours.

THRESHOLD = 28  # stop once this turn's progress points reach it
PLACEMENT_PENALTY = 6  # a move that puts out a new runner costs this much


def progress_value(column: int, faces: int) -> float:
    """Points per space advanced in a column: 1 in the middle (7 with six-sided dice), 6 at
    the edges (2 and 12), in between in proportion, so 8-sided dice work too."""
    return 1 + 5 * abs(column - (faces + 1)) / (faces - 1)


def turn_progress(state: GameState, seat: int) -> float:
    """The Rule of 28's count for the turn so far. It is read off the position (runner
    against marker), not remembered, so the bot can pick up any game half-way through a turn
    (after a restart, or a catch-up)."""
    faces = state["rules"].get("dice_faces", 6)
    turn = state["turn"]
    assert turn is not None
    markers = state["players"][seat]["markers"]
    runners = {int(c): space for c, space in turn["runners"].items()}
    total = sum(
        progress_value(c, faces) * (space - markers.get(str(c), 0) + 1)
        for c, space in runners.items()
    )
    if len(runners) == 3:  # the published bonuses, once all three runners are out
        middle = faces + 1
        if all(c % 2 for c in runners):
            total += 2
        elif not any(c % 2 for c in runners):
            total -= 2
        if all(c >= middle for c in runners):
            total += 4
        if all(c <= middle for c in runners):
            total += 4
    return total


def stopping_wins(state: GameState, seat: int) -> bool:
    """Would stopping now claim enough columns to win? (Then never risk a roll.)"""
    turn = state["turn"]
    assert turn is not None
    heights = {col["column"]: col["height"] for col in state["columns"]}
    topped = [c for c, space in turn["runners"].items() if space >= heights[int(c)]]
    claimed = len(state["players"][seat]["claimed"]) + len(topped)
    return claimed >= state["rules"].get("columns_to_win", 3)


def all_runners_topped(state: GameState) -> bool:
    """Three runners, each at the top of its column: every roll would bust."""
    turn = state["turn"]
    assert turn is not None
    heights = {col["column"]: col["height"] for col in state["columns"]}
    runners = turn["runners"]
    return len(runners) == 3 and all(space >= heights[int(c)] for c, space in runners.items())


def move_score(state: GameState, sums: list[int]) -> float:
    """Prefer middle columns (more chances to advance again) and columns already holding a
    runner (no new runner spent)."""
    faces = state["rules"].get("dice_faces", 6)
    turn = state["turn"]
    assert turn is not None
    placed = {c for c in sums if str(c) not in turn["runners"]}
    return sum(7 - progress_value(c, faces) for c in sums) - PLACEMENT_PENALTY * len(placed)


def choose(state: GameState, seat: int) -> LegalAction:
    """One of ``state["legal_actions"]``: the server lists exactly what is allowed now, so the
    bot never has to know the rules' fine print (forced moves, jumping, steep hill...)."""
    legal = state["legal_actions"]
    moves = [a for a in legal if a["type"] == "move"]
    if moves:  # phase move: the best-scoring move (the first listed on a tie)
        return max(moves, key=lambda a: move_score(state, a.get("sums", [])))
    stop: LegalAction = {"type": "stop"}
    if stop not in legal:  # phase roll, or a forced move that obliges a roll
        return {"type": "roll"}
    if stopping_wins(state, seat) or all_runners_topped(state):
        return stop
    return stop if turn_progress(state, seat) >= THRESHOLD else {"type": "roll"}


# ------------------------------------------------------------------------------ the bot
class Bot:
    """Reacts to the account's notices. Work is handed to a small thread pool so that a slow
    game never holds up the stream (or the other games); one game is played by one thread at a
    time (two notices for the same game would otherwise race to act)."""

    def __init__(
        self,
        client: Client,
        *,
        workers: int,
        seek: bool,
        games: int | None,
        rated: bool = False,
        clock: int | None = None,
        tournament: str | None = None,
    ) -> None:
        self.client = client
        self.tournament = tournament
        # What its seek and its challenge ask for: a rated game needs a clock (contract 1.3).
        self.rated = rated
        self.clock = {"turn_seconds": clock or 60} if rated or clock else None
        self.handle = str(client.account()["handle"])
        self.seek = seek
        self.games_wanted = games
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="game")
        self.lock = threading.Lock()
        self.running: set[str] = set()  # games a thread is playing now
        self.again: set[str] = set()  # games told your_turn while being played
        self.finished: set[str] = set()
        self.accepting: set[str] = set()  # a challenge seen by the catch-up and by a notice
        self.started = False
        self.open_seek: str | None = None  # the last seek placed
        self.challenge_on_start: str | None = None
        self.stream = client.account_stream(on_open=self.catch_up, max_failures=None)

    def log(self, text: str) -> None:
        print(f"[{self.handle}] {text}", flush=True)

    # ----------------------------------------------------------------- the loop
    def run(self, challenge: str | None) -> None:
        self.challenge_on_start = challenge
        try:
            for notice in self.stream:  # one connection, resumed by itself after drops
                self.on_notice(notice)
        finally:
            self.pool.shutdown(wait=True)
            self.withdraw_seek()  # leaving: a seek paired now would make a game nobody plays

    def catch_up(self) -> None:
        """At each (re)connection: the games where we may be to act, and the challenges that
        came while we were away (the stream starts from now). The first time, once the stream
        is open (so that their game_started is heard), challenge and seek as asked."""
        if not self.started:
            self.started = True
            if self.challenge_on_start is not None:
                sent = self.client.challenge(
                    self.challenge_on_start, rated=self.rated or None, clock=self.clock
                )
                self.log(f"challenged {self.challenge_on_start}: {sent['status']} ({sent['id']})")
            if self.seek:
                self.place_seek()
            if self.tournament is not None:
                self.enter(self.tournament)
        for game in self.client.all_account_games(self.handle, status="in_progress"):
            self.schedule(str(game["game_id"]))
        for pending in self.client.challenges()["incoming"]:
            self.pool.submit(self.accept, pending["id"], pending["from"])

    def on_notice(self, notice: Notice) -> None:
        if notice.type == "challenge" and notice.challenge is not None:
            if notice.challenge["status"] == "pending":
                self.pool.submit(self.accept, notice.challenge["id"], notice.challenge["from"])
        elif notice.type == "your_turn" and notice.game_id is not None:
            self.schedule(notice.game_id)
        elif notice.type == "game_started" and notice.game_id is not None:
            self.log(f"game {notice.game_id} started, seat {notice.seat}")
        elif notice.type == "game_finished" and notice.game_id is not None:
            self.game_over(notice)
        elif notice.type == "seek_expired" and self.seek and notice.seek is not None:
            self.seek_expired(notice.seek["id"])
        # Other types (challenge_declined, challenge_canceled, challenge_expired, types added
        # later) need nothing from this bot; a bot that tracks its challenges would look here.

    def enter(self, tournament_id: str) -> None:
        """Register (once: already registered is fine), then follow the tournament's stream in
        a thread until it ends, and stop the bot then; its tables come by the account stream."""
        try:
            self.client.register(tournament_id)
            self.log(f"registered in tournament {tournament_id}")
        except ApiError as exc:
            if exc.code != "already_registered":
                raise
        threading.Thread(target=self.follow, args=(tournament_id,), daemon=True).start()

    def follow(self, tournament_id: str) -> None:
        if self.client.tournament(tournament_id)["status"] != "finished":
            with self.client.tournament_stream(tournament_id, max_failures=None) as events:
                for event in events:
                    if event.get("type") == "Finished":
                        break
        standings = self.client.standings(tournament_id)
        mine = next((s for s in standings if s["handle"].lower() == self.handle.lower()), None)
        place = f"rank {mine['rank']}, {mine['points']:g} points" if mine else "not ranked"
        self.log(f"tournament {tournament_id} finished: {place}")
        self.stream.close()  # ends the loop in run(); games in hand are finished first

    def accept(self, challenge_id: str, challenger: str) -> None:
        with self.lock:
            if challenge_id in self.accepting:
                return
            self.accepting.add(challenge_id)
        try:
            accepted = self.client.accept_challenge(challenge_id)
        except ApiError as exc:  # already accepted (catch-up and notice), canceled, expired
            self.log(f"challenge {challenge_id} from {challenger} not accepted: {exc.code}")
            return
        self.log(f"accepted {challenger}'s challenge: game {accepted['game']['id']}")

    def game_over(self, notice: Notice) -> None:
        game_id = str(notice.game_id)
        with self.lock:
            if game_id in self.finished:
                return
            self.finished.add(game_id)
            done = len(self.finished)
        result = "won" if notice.winner is not None and notice.winner == notice.seat else "lost"
        self.log(f"game {game_id} finished: {result} ({done} finished)")
        if self.games_wanted is not None and done >= self.games_wanted:
            self.stream.close()  # ends the loop in run(); games in hand are finished first
        elif self.seek:
            self.place_seek()

    def place_seek(self) -> None:
        try:
            placed = self.client.seek(players=2, rated=self.rated or None, clock=self.clock)
        except ApiError as exc:
            self.log(f"no seek placed: {exc.code}")
            return
        self.open_seek = placed["id"]
        self.log(f"seeking a game ({placed['id']})")

    def seek_expired(self, seek_id: str) -> None:
        """Nobody came in time: keep a seek open (the server announces the expiry once)."""
        if seek_id == self.open_seek:
            self.place_seek()

    def withdraw_seek(self) -> None:
        if self.open_seek is None:
            return
        try:
            if self.client.get_seek(self.open_seek)["status"] == "open":
                self.client.withdraw_seek(self.open_seek)
                self.log(f"seek {self.open_seek} withdrawn")
        except ApiError as exc:
            self.log(f"seek {self.open_seek} not withdrawn: {exc.code}")

    # ----------------------------------------------------------------- playing
    def schedule(self, game_id: str) -> None:
        with self.lock:
            if game_id in self.running:
                self.again.add(game_id)  # the thread playing it looks once more when done
                return
            self.running.add(game_id)
        self.pool.submit(self.run_game, game_id)

    def run_game(self, game_id: str) -> None:
        while True:
            try:
                self.play(game_id)
            except ApiError as exc:
                # A notice can be stale by the time it is read (the turn timed out, the
                # opponent resigned): the server's refusal says so, and records nothing.
                self.log(f"game {game_id}: {exc.code}: {exc.detail}")
            except Exception as exc:  # keep the bot alive for its other games
                self.log(f"game {game_id}: {exc!r}")
            with self.lock:
                if game_id in self.again:
                    self.again.discard(game_id)
                    continue
                self.running.discard(game_id)
                return

    def play(self, game_id: str) -> None:
        """Act until the turn passes. One read of the state, then each action's answer holds
        the next state, so a whole turn costs one GET and one POST per action."""
        state = self.client.game(game_id)
        seat = self.my_seat(state)
        while (
            seat is not None
            and state["status"] == "in_progress"
            and state["turn"] is not None
            and state["turn"]["player"] == seat
        ):
            # If-Match: act only on the version we decided on, never on a state we have not
            # seen (412 otherwise). The client's Idempotency-Key makes its retries safe.
            result = self.client.act(game_id, choose(state, seat), if_match=state["version"])
            state = result["game"]

    def my_seat(self, state: GameState) -> int | None:
        for player in state["players"]:
            account = player.get("account")
            if isinstance(account, str) and account.lower() == self.handle.lower():
                return player["seat"]
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--url", default=os.environ.get("CANTSTOP_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("CANTSTOP_TOKEN"))
    parser.add_argument("--seek", action="store_true", help="keep a seek open for a 2-player game")
    parser.add_argument("--challenge", metavar="HANDLE", help="challenge this account on start")
    parser.add_argument("--games", type=int, help="stop after this many games finished")
    parser.add_argument("--workers", type=int, default=4, help="games played at once")
    parser.add_argument("--sign-up", metavar="HANDLE", help="create a bot account, print its token")
    parser.add_argument("--rated", action="store_true", help="seek and challenge for rated games")
    parser.add_argument("--clock", type=int, metavar="SECONDS", help="a turn's time (rated: 60)")
    parser.add_argument(
        "--tournament", metavar="ID", help="register, play every table, stop when it ends"
    )
    args = parser.parse_args(argv)
    with Client(args.url, args.token) as client:
        if args.sign_up:
            print(client.sign_up(args.sign_up, bot=True)["token"])
            return 0
        if not args.token:
            parser.error("a bot account's token: --token or CANTSTOP_TOKEN (see --sign-up)")
        bot = Bot(
            client,
            workers=args.workers,
            seek=args.seek,
            games=args.games,
            rated=args.rated,
            clock=args.clock,
            tournament=args.tournament,
        )
        try:
            bot.run(args.challenge)
        except KeyboardInterrupt:
            bot.stream.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
