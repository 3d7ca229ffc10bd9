"""``POST /v1/transcripts/verify`` with a trace: the state after every applied action, streamed
as the replay makes it, never held whole (service/http/transcripts.py ``traced``)."""

from __future__ import annotations

import json
import random
import tracemalloc
import uuid
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from domain.commands import NewGame
from domain.game import Game
from domain.position import Position
from domain.transcript import verify

Json = dict[str, Any]


def long_transcript(actions: int, seed: int = 1) -> Json:
    """A two-player game of ``actions`` actions: each takes the first move offered and never
    stops, so every turn busts and the game never ends (the longest a transcript can be)."""
    dice = random.Random(seed)
    game = Game.start(uuid.UUID(int=seed), NewGame(players=["Ann", "Bob"], dice="manual"))
    played: list[Json] = []
    while len(played) < actions:
        seat = game.current
        assert seat is not None
        position = Position.from_game(game)
        if position.phase == "move":
            move = position.moves[0]
            game.move(seat, move)
            played.append({"type": "move", "sums": list(move)})
        else:
            roll = [dice.randint(1, 6) for _ in range(4)]
            game.roll(seat, dice=roll)
            played.append({"type": "roll", "dice": roll})
    return {"players": ["Ann", "Bob"], "actions": played}


def test_a_traced_verdict_is_the_replays_own(client: FlaskClient) -> None:
    """Streamed, the verdict and its trace are what ``verify`` makes of the transcript, whether
    every action holds or one is refused part way (the trace stops there)."""
    whole = long_transcript(300)
    refused = {**whole, "actions": [*whole["actions"][:150], {"type": "stop", "seat": 5}]}
    for transcript in (whole, refused):
        reply = client.post("/v1/transcripts/verify", json={**transcript, "trace": True})
        assert reply.status_code == 200
        assert reply.mimetype == "application/json"
        assert reply.get_json() == verify(transcript, trace=True)
    answer = client.post("/v1/transcripts/verify", json={**refused, "trace": True}).get_json()
    assert answer["applied"] == 150 and len(answer["trace"]) == 150
    assert answer["error"]["code"] == "not_your_turn"
    # a document that is no transcript is still refused before a byte of a verdict is sent
    reply = client.post("/v1/transcripts/verify", json={"players": [], "trace": True})
    assert reply.status_code == 422 and reply.get_json()["code"] == "invalid_request"


def test_a_long_trace_is_streamed_without_being_held_whole(app: Flask) -> None:
    """The attack: a 220 KB transcript of 7,000 actions asks for 8.8 MB of trace (~1.2 KB a
    state). Held whole, it made the worker hold 28 MB for one request; streamed, a trace costs
    the worker no more memory than the verdict without it (the request's own document, a
    chunk on its way out)."""
    transcript = long_transcript(7000)
    body = json.dumps({**transcript, "trace": True}).encode()
    assert len(body) < 256 * 1024  # within the default body limit: anyone may send it
    client = app.test_client()

    def peak(trace: bool) -> tuple[int, int]:
        sent = json.dumps({**transcript, "trace": trace})
        tracemalloc.start()
        try:
            reply = client.post(
                "/v1/transcripts/verify", data=sent, content_type="application/json", buffered=False
            )
            assert reply.status_code == 200
            size = sum(len(chunk) for chunk in reply.response)  # read as a client would
            return tracemalloc.get_traced_memory()[1], size
        finally:
            tracemalloc.stop()

    plain, plain_size = peak(False)
    traced, traced_size = peak(True)
    assert traced_size > 8_000_000 and plain_size < 2_000
    assert traced < plain + 2_000_000, (traced, plain)
