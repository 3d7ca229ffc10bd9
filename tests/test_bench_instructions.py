"""bench/instructions.py: every tree plays the same games (its figures compare only if so), and a
valgrind run's count is read from its report."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import instructions
from service.persistence.compact import COMPACT, decode_event

ROOT = Path(__file__).resolve().parent.parent


def played(database: Path, actions: int) -> list[tuple[Any, ...]]:
    """The events of ``actions`` actions played by the bench's player, as stored, without what
    differs from run to run by design: each event's time, and the hashes that chain it."""
    env = {
        **os.environ,
        "CANTSTOP_DATABASE_URL": f"sqlite:///{database}",
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, str(ROOT / "bench" / "instructions.py"), "--play", str(actions)]
    subprocess.run(command, env=env, cwd=ROOT, check=True, timeout=120)
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY rowid"
        ).fetchall()
    events = []
    for originator_id, version, topic, state in rows:
        data = decode_event(state) if state[0] == COMPACT else json.loads(state)
        for varying in ("timestamp", "prev_hash", "hash"):
            data.pop(varying, None)
        events.append((originator_id, version, topic, data))
    return events


def test_two_runs_play_the_same_games_with_the_same_dice(tmp_path: Path) -> None:
    first = played(tmp_path / "first.sqlite", 60)
    second = played(tmp_path / "second.sqlite", 60)
    assert len(first) > 60  # a creation's events too
    assert first == second
    rolls = [e for e in first if e[2].endswith("DiceRolled")]
    assert rolls and all(len(e[3]["dice"]) == 4 for e in rolls)


def fake_valgrind(
    monkeypatch: pytest.MonkeyPatch, folder: Path, report: str, status: int = 0
) -> None:
    """A ``valgrind`` first on PATH that prints ``report`` and exits with ``status``."""
    script = folder / "valgrind"
    script.write_text(f"#!/bin/sh\necho '{report}' >&2\nexit {status}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_the_count_is_read_from_valgrinds_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_valgrind(monkeypatch, tmp_path, "==1== I   refs:      1,234,567,890")
    assert instructions.count(ROOT, 10) == 1_234_567_890


@pytest.mark.parametrize(("report", "status"), [("==1== I   refs:  5", 1), ("no count here", 0)])
def test_a_failed_run_stops_the_bench_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report: str, status: int
) -> None:
    fake_valgrind(monkeypatch, tmp_path, report, status)
    with pytest.raises(SystemExit, match="the run failed"):
        instructions.count(ROOT, 10)
