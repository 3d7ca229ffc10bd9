"""bench/views.py's copies dated back (``--spread``): a compact game event moves back in time by
exactly what was asked, every other field as it was; a row in another form is left as it is."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from bench.views import aged
from domain.commands import NewGame
from domain.game import Game
from service.application.store import GameEventMapper, ServiceTranscoder
from service.persistence.compact import COMPACT


def test_a_compact_event_dated_back_reads_back_that_much_earlier_and_nothing_else() -> None:
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    mapper = GameEventMapper(transcoder=ServiceTranscoder())
    for event in game.pending_events:
        stored = mapper.to_stored_event(event)
        assert stored.state[0] == COMPACT
        moved = mapper.to_domain_event(
            dataclasses.replace(stored, state=aged(stored.state, 86_400_000_001))
        )
        assert moved.timestamp == event.timestamp - timedelta(days=1, microseconds=1)
        assert {**vars(moved), "timestamp": None} == {**vars(event), "timestamp": None}
        assert aged(stored.state, 0) == stored.state
    json_form = b'{"timestamp": {"_type_": "datetime_iso", "_data_": "2026-11-30T00:00:00+00:00"}}'
    assert aged(json_form, 86_400_000_000) == json_form
