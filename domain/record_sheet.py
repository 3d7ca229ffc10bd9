"""The turn record sheet (rules-rulings.md, Solitaire), built from a game's served event history.

Pure: it reads event dicts as ``/events`` serves them (``version``, ``type``, ``at``, ``data``), or
the lines of an export file (JSON text or parsed; the ``cantstop-game`` header line gives the game
id). Only the events given are read: for the sheet at version N, pass the events up to N.

A row is one completed turn of the seat: a ``TurnStopped``, ``TurnBusted`` or ``TurnTimedOut`` of
that seat. Its text:
- a stop: each column that gained, ascending, as ``C×N``, then ``C Cap`` per column the stop
  claimed (``4×2, 8×2, 9×1``; ``6×3, 7×2, 7 Cap``). A column whose marker did not move (steep
  hill) is left out, so a stop that gained nothing has an empty text;
- a bust: ``S``; a bust that wiped markers (advanced solitaire) lists them: ``S – 4,5``;
- a turn that timed out (a clock): ``T``.
A resignation is not a completed turn and has no row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from domain import jsondoc
from domain.errors import InvalidRequest
from domain.rules import SOLITAIRE_TARGETS

TIMES = "\u00d7"  # ×
EN_DASH = "\u2013"  # –
EXPORT_FORMAT = "cantstop-game"
TURN_ENDS = ("TurnStopped", "TurnBusted", "TurnTimedOut")
TIMEOUT_TEXT = "T"

Event = Mapping[str, Any]
EventLine = Mapping[str, Any] | str | bytes
"""A served event dict, or one line of an export file (JSON text, or already parsed)."""


class SheetRow(TypedDict):
    turn: int
    """1-based count of this seat's completed turns."""
    result: Literal["stop", "bust", "timeout"]
    progress: dict[str, int]
    """Spaces gained per column (decimal-string keys, ascending); empty for a bust."""
    claimed: list[int]
    """Columns claimed by this stop, ascending."""
    wiped: list[int]
    """Columns whose marker this bust sent back to the bottom (advanced solitaire), ascending."""
    text: str
    claimed_total: int
    """Columns the seat holds after the turn."""
    version: int
    """The version of the TurnStopped/TurnBusted event."""


class RecordSheet(TypedDict):
    title: str
    game_id: str | None
    version: int
    """The last event read: the sheet is the game as it was just after it."""
    seat: int
    player: str
    """The name as recorded; ``one_line(player)`` for display."""
    mode: str | None
    """``easy`` or ``advanced`` for solitaire, None for a multiplayer game."""
    target: int | None
    rules: dict[str, Any]
    columns: list[int]
    created_at: str
    rows: list[SheetRow]
    turns: int
    claimed: list[int]
    """Columns the seat holds, ascending."""
    resigned: bool
    finished: bool
    finished_at: str | None
    finish_reason: str | None
    winner: str | None
    """The winner's name when finished (None: no winner, as when a solitaire player resigns)."""
    score: int | None
    """Turns taken, for a solitaire game won (every column claimed); else None."""
    rating: str | None


def row_text(progress: Mapping[str, int], claimed: Iterable[int]) -> str:
    """A stop's row: ``4×2, 8×2, 9×1`` then ``C Cap`` per claimed column (gains only)."""
    parts = [f"{c}{TIMES}{n}" for c, n in sorted((int(c), n) for c, n in progress.items()) if n > 0]
    parts += [f"{c} Cap" for c in sorted(claimed)]
    return ", ".join(parts)


def bust_text(wiped: Iterable[int]) -> str:
    """A bust's row: ``S``, or ``S – 4,5`` with the markers it wiped."""
    columns = sorted(wiped)
    return f"S {EN_DASH} {','.join(map(str, columns))}" if columns else "S"


def one_line(name: str) -> str:
    """A name fit for a title line: control characters and line breaks become single spaces."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in name).split())


def _parse(line: EventLine) -> Event | None:
    if isinstance(line, str | bytes):
        if not line.strip():
            return None
        parsed = jsondoc.loads(line)
        if not isinstance(parsed, Mapping):
            raise ValueError("an event line must be a JSON object")
        return parsed
    return line


def _read(lines: Iterable[EventLine]) -> tuple[str | None, list[Event]]:
    """The game id of an export's header line (if any) and the events, in the order given."""
    game_id: str | None = None
    events: list[Event] = []
    for line in lines:
        event = _parse(line)
        if event is None:
            continue
        if event.get("format") == EXPORT_FORMAT:
            game_id = None if event.get("game_id") is None else str(event["game_id"])
        else:
            events.append(event)
    return game_id, events


def _row(event: Event, turn: int, held: int) -> SheetRow:
    data = event["data"]
    if event["type"] == "TurnStopped":
        gains = sorted((int(c), int(n)) for c, n in data["progress"].items() if int(n) > 0)
        progress = {str(c): n for c, n in gains}
        claimed = sorted(int(c) for c in data["claimed"])
        return {
            "turn": turn,
            "result": "stop",
            "progress": progress,
            "claimed": claimed,
            "wiped": [],
            "text": row_text(progress, claimed),
            "claimed_total": held + len(claimed),
            "version": int(event["version"]),
        }
    if event["type"] == "TurnTimedOut":
        return {
            "turn": turn,
            "result": "timeout",
            "progress": {},
            "claimed": [],
            "wiped": [],
            "text": TIMEOUT_TEXT,
            "claimed_total": held,
            "version": int(event["version"]),
        }
    wiped = sorted(int(c) for c in data.get("wiped") or [])
    return {
        "turn": turn,
        "result": "bust",
        "progress": {},
        "claimed": [],
        "wiped": wiped,
        "text": bust_text(wiped),
        "claimed_total": held,
        "version": int(event["version"]),
    }


def _is_turn_of(event: Event, seat: int) -> bool:
    return event.get("type") in TURN_ENDS and event["data"]["seat"] == seat


def sheet_rows(events: Iterable[EventLine], seat: int = 0) -> list[SheetRow]:
    """One row per completed turn of ``seat`` (stops, busts, timeouts), in the order given."""
    rows: list[SheetRow] = []
    held = 0
    for event in _read(events)[1]:
        if _is_turn_of(event, seat):
            row = _row(event, len(rows) + 1, held)
            held = row["claimed_total"]
            rows.append(row)
    return rows


def record_sheet(
    events: Iterable[EventLine], seat: int = 0, *, game_id: str | None = None
) -> RecordSheet:
    """The whole sheet of ``seat``: the game's particulars, its rows, and the result when finished.

    Raises ValueError when the history does not start with GameCreated, and InvalidRequest when the
    game has no such seat.
    """
    header_id, history = _read(events)
    game_id = header_id if game_id is None else game_id
    if not history or history[0].get("type") != "GameCreated":
        raise ValueError("a game's history starts with its GameCreated event")
    created = history[0]["data"]
    seats = int(created["seats"])
    if isinstance(seat, bool) or not isinstance(seat, int) or not 0 <= seat < seats:
        raise InvalidRequest(f"seat must be from 0 to {seats - 1}, not {seat!r}")
    rules = dict(created["rules"])
    mode = rules.get("solitaire")
    faces = int(rules.get("dice_faces", 6))
    names: list[str | None] = list(created["players"] or [None] * seats)

    resigned = False
    finished: Event | None = None
    for event in history:
        data = event["data"]
        if event["type"] == "SeatJoined":
            names[data["seat"]] = data["name"]
        elif event["type"] == "PlayerResigned" and data["seat"] == seat:
            resigned = True
        elif event["type"] == "GameFinished":
            finished = event
    rows = sheet_rows(history, seat)
    player = names[seat] or f"Seat {seat}"

    winner = score = rating = None
    if finished is not None:
        result = finished["data"]
        if result["winner"] is not None:
            winner = names[result["winner"]] or f"Seat {result['winner']}"
        if mode and result["winner"] == seat and result["reason"] == "columns":
            score = int(result["turns"])
            rating = result.get("rating")
    if mode:
        title = f"Can't Stop solitaire ({mode}) {EN_DASH} {one_line(player)}"
    else:
        title = f"Can't Stop {EN_DASH} {one_line(player)} (seat {seat})"
    return {
        "title": title,
        "game_id": game_id,
        "version": int(history[-1]["version"]),
        "seat": seat,
        "player": player,
        "mode": mode,
        "target": SOLITAIRE_TARGETS[mode] if mode else None,
        "rules": rules,
        "columns": list(range(2, 2 * faces + 1)),
        "created_at": str(history[0]["at"]),
        "rows": rows,
        "turns": len(rows),
        "claimed": sorted(c for row in rows for c in row["claimed"]),
        "resigned": resigned,
        "finished": finished is not None,
        "finished_at": str(finished["at"]) if finished is not None else None,
        "finish_reason": finished["data"]["reason"] if finished is not None else None,
        "winner": winner,
        "score": score,
        "rating": rating,
    }
