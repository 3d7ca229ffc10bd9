"""The board at one state, drawn as a standalone SVG document (``GET /v1/games/{id}/board.svg``).

``render_board(state)`` takes a state in the contract's shape (``domain.view.game_state``, or the
same dict read back from JSON) and returns an SVG document as text. It uses the standard library
only: the document is built with ``xml.etree.ElementTree``, so every player name and every other
piece of text is escaped by the serializer, never pasted into markup. The output is deterministic:
the same state always gives the same bytes (no clocks, no randomness, fixed number formatting).

Hooks for scripts and tests (stable ``id``/``class``/``data-*`` attributes):

- ``<svg class="cantstop-board" data-status data-version data-game-id>``
- ``<g class="column" id="column-7" data-column="7" data-height="13" data-claimed-by="0">``
  (``data-claimed-by`` only on claimed columns) holding
  ``<rect class="space" data-column="7" data-space="1..height">`` bottom to top, the column's
  ``<text class="column-label">``, its markers and runner, and on a claimed column a
  ``<polygon class="claim-star" data-seat>``.
- ``<circle class="marker seat-0" id="marker-0-7" data-seat="0" data-column="7" data-space="3">``
  filled with the seat's colour.
- ``<polygon class="runner" id="runner-7" data-seat data-column data-space>`` (this turn's runners).
- ``<g class="legend-entry" data-seat data-colour data-claimed data-resigned>`` with
  ``<circle class="legend-swatch">``, ``<text class="legend-name" data-name="(the name, exactly)">``
  reading "Name (seat N)", ``<text class="legend-claimed">`` and ``<text class="legend-status">``
  ("(resigned)", "★ winner", "◀ to play").
- Header texts ``class="header-status" / "header-turn" / "header-winner"`` and dice
  ``<g class="die" data-value>``.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["PALETTE", "SVG_NS", "colour_of", "render_board"]

SVG_NS = "http://www.w3.org/2000/svg"

# Okabe & Ito's colour-blind-safe palette, by seat: (fill, name, text colour on that fill).
PALETTE: tuple[tuple[str, str, str], ...] = (
    ("#0072B2", "blue", "#ffffff"),
    ("#E69F00", "orange", "#1a1a1a"),
    ("#009E73", "green", "#ffffff"),
    ("#CC79A7", "pink", "#1a1a1a"),
    ("#56B4E9", "sky blue", "#1a1a1a"),
    ("#D55E00", "vermilion", "#ffffff"),
    ("#F0E442", "yellow", "#1a1a1a"),
    ("#3A3A3A", "dark grey", "#ffffff"),
)

FONT = "DejaVu Sans, Verdana, Arial, Helvetica, sans-serif"
BACKGROUND = "#fbf9f4"
INK = "#1f1f1f"
MUTED = "#5f5a50"
TRACK_FILL = "#ece3cf"
TRACK_STROKE = "#bfb193"
SPACE_FILL = "#ffffff"
SPACE_STROKE = "#c6baa0"

MARGIN = 28
COL_W = 46  # a column's track
COL_GAP = 8
SPACE_H = 30
SPACE_PAD = 4  # between a track's edge and its spaces
LABEL_R = 14  # the column number's disc, under the column
CAP_H = 30  # room above the tallest column for a claimed column's star
ROW_H = 24  # header and legend rows
TITLE_SIZE = 20
TEXT_SIZE = 14
SMALL_SIZE = 12
CHAR_W = 0.62  # estimated average glyph width, in ems, for layout (deterministic)

KEY_ITEMS = ("marker: saved progress", "runner: this turn's progress", "claimed column")
KEY_GAP = 22
RUNNER_SPACE = "#fff1b8"  # a space holding a runner
SPACE_NUMBER_SIZE = 9
SPACE_NUMBER_INK = "#b9af9a"

PHASES = {"roll": "roll", "move": "choose a move", "roll_or_stop": "roll or stop"}
STATUSES = {"waiting": "Waiting for players", "in_progress": "In progress", "finished": "Finished"}
REASONS = {
    "columns": "claimed {n} column{s}",
    "last_player": "last player left",
    "resigned": "everyone resigned",
    "abandoned": "abandoned",
    "aborted": "aborted: ended before every seat had played",
}

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# ------------------------------------------------------------------------------------ helpers
def colour_of(seat: int) -> str:
    """The fill colour of ``seat``'s markers."""
    return PALETTE[seat % len(PALETTE)][0]


def _clean(text: Any) -> str:
    """Text safe for XML 1.0: characters XML cannot carry at all become U+FFFD."""
    return _NOT_XML.sub("\ufffd", str(text))


def _num(value: float) -> str:
    """A coordinate, always written the same way: at most two decimals, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _text_width(text: str, size: float) -> float:
    return len(text) * size * CHAR_W


def _key_width(text: str) -> float:
    """The legend key's own small texts: plain lower case, narrower than the estimate for names."""
    return _text_width(text, SMALL_SIZE) * 0.85


def _el(parent: ET.Element, tag: str, text: str | None = None, **attrs: Any) -> ET.Element:
    """A child element; attribute names use ``_`` for ``-`` and a trailing ``_`` for keywords."""
    el = ET.SubElement(parent, tag)
    for key, value in attrs.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        if isinstance(value, float):
            value = _num(value)
        el.set(name, _clean(value))
    if text is not None:
        el.text = _clean(text)
    return el


def _star(cx: float, cy: float, outer: float, inner: float) -> str:
    points = []
    for i in range(10):
        radius = outer if i % 2 == 0 else inner
        angle = math.pi / 5 * i - math.pi / 2
        points.append(
            f"{_num(cx + radius * math.cos(angle))},{_num(cy + radius * math.sin(angle))}"
        )
    return " ".join(points)


def _triangle(cx: float, cy: float, r: float) -> str:
    pts = ((cx, cy - 1.2 * r), (cx - 1.1 * r, cy + 0.85 * r), (cx + 1.1 * r, cy + 0.85 * r))
    return " ".join(f"{_num(x)},{_num(y)}" for x, y in pts)


def _positions(raw: Any) -> dict[int, int]:
    """A ``{"7": 3}`` map (or one with int keys) as ints, positions above 0 only."""
    if not isinstance(raw, Mapping):
        return {}
    return {int(column): int(at) for column, at in raw.items() if int(at) > 0}


def _player_label(player: Mapping[str, Any] | None, seat: int) -> str:
    name = player.get("name") if player else None
    return f"{name} (seat {seat})" if name is not None else f"open seat {seat}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _columns_text(columns: Iterable[int]) -> str:
    return ", ".join(str(c) for c in columns)


# ------------------------------------------------------------------------------------- render
def render_board(state: Mapping[str, Any], *, title: str | None = None) -> str:
    """The board at ``state`` (the contract's State) as a standalone SVG document."""
    return _Renderer(state, title).render()


class _Renderer:
    def __init__(self, state: Mapping[str, Any], title: str | None) -> None:
        self.state = state
        self.columns: list[Mapping[str, Any]] = list(state.get("columns") or [])
        self.players: list[Mapping[str, Any]] = list(state.get("players") or [])
        self.turn: Mapping[str, Any] | None = state.get("turn")
        self.rules: Mapping[str, Any] = state.get("rules") or {}
        self.status = str(state.get("status") or "")
        self.version = state.get("version")
        self.game_id = state.get("id")
        self.winner: int | None = state.get("winner")
        default_title = "Can't Stop board"
        if self.game_id is not None:
            default_title += f" — game {self.game_id}"
        self.title = default_title if title is None else title
        self.current: int | None = self.turn.get("player") if self.turn else None
        self.runners = _positions(self.turn.get("runners")) if self.turn else {}
        dice = self.turn.get("dice") if self.turn else None
        self.dice: list[int] = [int(d) for d in dice] if dice else []
        self.to_win = self.rules.get("columns_to_win")
        # markers[column][space] = seats there, ascending
        self.markers: dict[int, dict[int, list[int]]] = {}
        for player in self.players:
            seat = int(player["seat"])
            for column, at in sorted(_positions(player.get("markers")).items()):
                self.markers.setdefault(column, {}).setdefault(at, []).append(seat)

    # ------------------------------------------------------------------------------ text
    def player(self, seat: int | None) -> Mapping[str, Any] | None:
        if seat is None:
            return None
        for player in self.players:
            if player.get("seat") == seat:
                return player
        return None

    def label(self, seat: int) -> str:
        return _player_label(self.player(seat), seat)

    def status_line(self) -> str:
        text = STATUSES.get(self.status, self.status or "unknown")
        if self.version is not None:
            text += f" · version {self.version}"
        if self.status == "waiting":
            open_seats = sum(1 for p in self.players if p.get("name") is None)
            text += f" · {_plural(open_seats, 'open seat')}"
        return text

    def turn_line(self) -> str | None:
        if not self.turn or self.current is None:
            return None
        phase = self.turn.get("phase")
        text = self.label(self.current)
        if phase:
            text += f" to {PHASES.get(str(phase), str(phase))}"
        return text + f" · turn {self.turn.get('number')}"

    def winner_line(self) -> str | None:
        if self.status != "finished":
            return None
        reason = self.state.get("finish_reason")
        if self.winner is None:
            return "none" + (f" ({REASONS.get(reason, reason)})" if reason else "")
        text = self.label(self.winner)
        claimed = len((self.player(self.winner) or {}).get("claimed") or [])
        if reason:
            why = REASONS.get(str(reason), str(reason))
            text += " — " + why.format(n=claimed, s="" if claimed == 1 else "s")
        return text

    def rules_line(self) -> str:
        parts = []
        if self.to_win is not None:
            parts.append(f"{_plural(int(self.to_win), 'column')} to win")
        parts.append(f"{self.rules.get('dice_faces', 6)}-sided dice")
        variants = [
            name.replace("_", " ")
            for name in ("jumping", "forced_move", "steep_hill")
            if self.rules.get(name)
        ]
        if variants:
            parts.append("variants: " + ", ".join(variants))
        dice_mode = self.state.get("dice")
        if dice_mode:
            parts.append(f"{dice_mode} dice")
        return " · ".join(parts)

    def solitaire_line(self) -> str | None:
        solo = self.state.get("solitaire")
        if not isinstance(solo, Mapping):
            return None
        mode = solo.get("mode") or self.rules.get("solitaire") or ""
        text = f"{mode} · {_plural(int(solo.get('turns') or 0), 'turn')}".strip(" ·")
        if solo.get("target") is not None:
            text += f" (target {solo['target']})"
        if solo.get("rating"):
            text += f" · rating: {solo['rating']}"
        return text

    def description(self) -> str:
        faces = self.rules.get("dice_faces", 6)
        lines = [
            f"The board of a game of Can't Stop ({faces}-sided dice, "
            f"{_plural(len(self.columns), 'column')}).",
            f"Status: {self.status_line()}.",
        ]
        turn = self.turn_line()
        if turn:
            lines.append(f"Turn {turn}.")
            if self.dice:
                lines.append("Dice rolled: " + " ".join(str(d) for d in self.dice) + ".")
            runners = ", ".join(
                f"column {c} at space {at}" for c, at in sorted(self.runners.items())
            )
            lines.append(f"Runners: {runners or 'none'}.")
        winner = self.winner_line()
        if winner:
            lines.append(f"Winner: {winner}.")
        for player in self.players:
            seat = int(player["seat"])
            markers = ", ".join(
                f"column {c} at space {at}"
                for c, at in sorted(_positions(player.get("markers")).items())
            )
            claimed = _columns_text(player.get("claimed") or []) or "none"
            resigned = " Resigned." if player.get("resigned") else ""
            lines.append(
                f"{self.label(seat)}, {PALETTE[seat % len(PALETTE)][1]}: "
                f"markers {markers or 'none'}; claimed {claimed}.{resigned}"
            )
        return " ".join(lines)

    def legend_claimed(self, player: Mapping[str, Any]) -> str:
        claimed = [int(c) for c in player.get("claimed") or []]
        text = f"claimed {len(claimed)}"
        if self.to_win is not None:
            text += f" of {self.to_win}"
        if claimed:
            text += f": {_columns_text(claimed)}"
        return text

    def legend_tags(self, player: Mapping[str, Any]) -> str:
        seat = player.get("seat")
        tags = []
        if player.get("resigned"):
            tags.append("(resigned)")
        if self.status == "finished" and seat == self.winner and self.winner is not None:
            tags.append("★ winner")
        if self.current is not None and seat == self.current:
            tags.append("◀ to play")
        return "  ".join(tags)

    # ---------------------------------------------------------------------------- layout
    def header_rows(self) -> list[tuple[str, str, str | None]]:
        """(class, label, value) rows; the dice row's value is drawn as dice."""
        rows: list[tuple[str, str, str | None]] = [("header-status", "Status", self.status_line())]
        turn = self.turn_line()
        if turn:
            rows.append(("header-turn", "Turn", turn))
            rows.append(("header-dice", "Dice", None))
        winner = self.winner_line()
        if winner:
            rows.append(("header-winner", "Winner", winner))
        solo = self.solitaire_line()
        if solo:
            rows.append(("header-solitaire", "Solitaire", solo))
        rows.append(("header-rules", "Rules", self.rules_line()))
        return rows

    def render(self) -> str:
        max_height = max((int(c.get("height") or 0) for c in self.columns), default=0)
        board_w = len(self.columns) * (COL_W + COL_GAP) - COL_GAP if self.columns else 0
        board_h = CAP_H + max_height * SPACE_H + 2 * SPACE_PAD + 2 * LABEL_R + 10

        value_x = 96
        header_rows = self.header_rows()
        header_w = max(
            [_text_width(self.title, TITLE_SIZE * 1.08)]
            + [value_x + 20 + _text_width(v or "", TEXT_SIZE) for _, _, v in header_rows]
        )
        header_h = TITLE_SIZE + 14 + len(header_rows) * ROW_H

        name_w = max(
            (_text_width(self.label(int(p["seat"])), TEXT_SIZE) for p in self.players), default=0
        )
        claimed_w = max(
            (_text_width(self.legend_claimed(p), TEXT_SIZE) for p in self.players), default=0
        )
        tags_w = max((_text_width(self.legend_tags(p), TEXT_SIZE) for p in self.players), default=0)
        name_x = 26
        claimed_x = name_x + max(name_w, 120) + 24
        tags_x = claimed_x + max(claimed_w, 110) + 24
        key_w = sum(22 + _key_width(t) + KEY_GAP for t in KEY_ITEMS) - KEY_GAP
        legend_w = max(tags_x + tags_w, key_w)
        legend_h = 26 + len(self.players) * ROW_H + 14 + ROW_H

        inner_w = max(board_w, header_w, legend_w)
        width = math.ceil(inner_w + 2 * MARGIN)
        height = math.ceil(MARGIN + header_h + 18 + board_h + 22 + legend_h + MARGIN)

        root = ET.Element("svg")
        for key, value in (
            ("xmlns", SVG_NS),
            ("version", "1.1"),
            ("width", str(width)),
            ("height", str(height)),
            ("viewBox", f"0 0 {width} {height}"),
            ("role", "img"),
            ("aria-labelledby", "board-title board-desc"),
            ("class", "cantstop-board"),
            ("font-family", FONT),
            ("data-status", self.status),
            ("data-version", "" if self.version is None else str(self.version)),
            ("data-game-id", "" if self.game_id is None else str(self.game_id)),
        ):
            root.set(key, _clean(value))
        _el(root, "title", self.title, id="board-title")
        _el(root, "desc", self.description(), id="board-desc")
        _el(
            root, "rect", class_="background", x=0, y=0, width=width, height=height, fill=BACKGROUND
        )

        y = MARGIN
        self.draw_header(root, MARGIN, y, value_x, header_rows)
        y += header_h + 18
        board_x = MARGIN + (inner_w - board_w) / 2
        self.draw_board(root, board_x, y, max_height)
        y += board_h + 22
        self.draw_legend(root, MARGIN, y, inner_w, name_x, claimed_x, tags_x)

        ET.indent(root, space="  ")
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"

    # ----------------------------------------------------------------------------- header
    def draw_header(
        self,
        root: ET.Element,
        x: float,
        y: float,
        value_x: float,
        rows: Sequence[tuple[str, str, str | None]],
    ) -> None:
        group = _el(root, "g", class_="header")
        _el(
            group,
            "text",
            self.title,
            class_="header-title",
            x=float(x),
            y=float(y + TITLE_SIZE),
            font_size=TITLE_SIZE,
            font_weight="bold",
            fill=INK,
        )
        y += TITLE_SIZE + 14
        for cls, label, value in rows:
            baseline = y + ROW_H / 2 + TEXT_SIZE * 0.36
            _el(
                group,
                "text",
                label,
                class_="header-label",
                x=float(x),
                y=baseline,
                font_size=TEXT_SIZE,
                fill=MUTED,
            )
            vx = x + value_x
            seat = None
            if cls == "header-turn":
                seat = self.current
            elif cls == "header-winner":
                seat = self.winner
            if seat is not None:
                self.swatch(group, vx + 7, y + ROW_H / 2, 7, seat, "header-swatch")
                vx += 20
            if cls == "header-dice":
                self.draw_dice(group, vx, y + 2)
            else:
                _el(
                    group,
                    "text",
                    value,
                    class_=cls,
                    x=vx,
                    y=baseline,
                    font_size=TEXT_SIZE if cls != "header-rules" else SMALL_SIZE + 1,
                    fill=INK if cls != "header-rules" else MUTED,
                    font_weight="bold" if cls == "header-winner" else None,
                )
            y += ROW_H

    def draw_dice(self, parent: ET.Element, x: float, y: float) -> None:
        size = ROW_H - 4
        if not self.dice:
            _el(
                parent,
                "text",
                "none waiting to be used",
                class_="header-dice",
                x=x,
                y=y + size / 2 + TEXT_SIZE * 0.36,
                font_size=TEXT_SIZE,
                fill=MUTED,
            )
            return
        group = _el(parent, "g", class_="header-dice dice")
        for i, value in enumerate(self.dice):
            die = _el(group, "g", class_="die", data_value=value)
            dx = x + i * (size + 6)
            _el(
                die,
                "rect",
                x=dx,
                y=float(y),
                width=size,
                height=size,
                rx=4,
                fill="#ffffff",
                stroke=INK,
                stroke_width=1.5,
            )
            _el(
                die,
                "text",
                str(value),
                x=dx + size / 2,
                y=y + size / 2 + TEXT_SIZE * 0.36,
                font_size=TEXT_SIZE,
                font_weight="bold",
                text_anchor="middle",
                fill=INK,
            )

    # ------------------------------------------------------------------------------ board
    def draw_board(self, root: ET.Element, x0: float, y0: float, max_height: int) -> None:
        board = _el(root, "g", class_="board")
        base = y0 + CAP_H + max_height * SPACE_H + SPACE_PAD  # bottom edge of the spaces
        for i, column in enumerate(self.columns):
            self.draw_column(board, x0 + i * (COL_W + COL_GAP), base, column)

    def draw_column(
        self, parent: ET.Element, x: float, base: float, column: Mapping[str, Any]
    ) -> None:
        number = int(column["column"])
        height = int(column.get("height") or 0)
        owner = column.get("claimed_by")
        owner = None if owner is None else int(owner)
        group = _el(
            parent,
            "g",
            class_="column" + (" claimed" if owner is not None else ""),
            id=f"column-{number}",
            data_column=number,
            data_height=height,
            data_claimed_by=owner,
        )
        top = base - height * SPACE_H
        colour = colour_of(owner) if owner is not None else None
        _el(
            group,
            "rect",
            class_="track",
            x=float(x),
            y=top - SPACE_PAD,
            width=COL_W,
            height=height * SPACE_H + 2 * SPACE_PAD,
            rx=9,
            fill="#ffffff" if colour else TRACK_FILL,
            stroke=colour or TRACK_STROKE,
            stroke_width=3 if colour else 1.2,
        )
        for space in range(1, height + 1):
            sy = base - space * SPACE_H + 2
            is_top = space == height
            fill = RUNNER_SPACE if self.runners.get(number) == space else SPACE_FILL
            opacity = None
            if colour:
                fill, opacity = colour, 0.65 if is_top else 0.28
            _el(
                group,
                "rect",
                class_="space" + (" top" if is_top else ""),
                data_column=number,
                data_space=space,
                x=x + SPACE_PAD,
                y=float(sy),
                width=COL_W - 2 * SPACE_PAD,
                height=SPACE_H - 4,
                rx=5,
                fill=fill,
                fill_opacity=opacity,
                stroke=colour or SPACE_STROKE,
                stroke_width=1,
            )
        # each empty space shows its number, faintly, to count by
        occupied = set(self.markers.get(number, {}))
        if number in self.runners:
            occupied.add(self.runners[number])
        for space in range(1, height + 1):
            if space not in occupied:
                _el(
                    group,
                    "text",
                    str(space),
                    class_="space-number",
                    x=x + COL_W / 2,
                    y=base - (space - 0.5) * SPACE_H + 1 + SPACE_NUMBER_SIZE * 0.36,
                    font_size=SPACE_NUMBER_SIZE,
                    text_anchor="middle",
                    fill=SPACE_NUMBER_INK if owner is None else MUTED,
                )
        # the column's number, in a disc under it (the claimant's colour when claimed)
        cx = x + COL_W / 2
        cy = base + SPACE_PAD + 6 + LABEL_R
        text_colour = INK
        if owner is not None:
            text_colour = PALETTE[owner % len(PALETTE)][2]
        _el(
            group,
            "circle",
            class_="column-disc",
            cx=cx,
            cy=cy,
            r=LABEL_R,
            fill=colour or "#ffffff",
            stroke=colour or TRACK_STROKE,
            stroke_width=1.5,
        )
        _el(
            group,
            "text",
            str(number),
            class_="column-label",
            data_column=number,
            x=cx,
            y=cy + TEXT_SIZE * 0.36,
            font_size=TEXT_SIZE,
            font_weight="bold",
            text_anchor="middle",
            fill=text_colour,
        )
        if owner is not None:
            star = _el(
                group,
                "polygon",
                class_="claim-star",
                data_seat=owner,
                data_column=number,
                points=_star(cx, top - SPACE_PAD - 14, 11, 4.6),
                fill=colour,
                stroke=INK,
                stroke_width=1,
                stroke_linejoin="round",
            )
            _el(star, "title", f"column {number} claimed by {self.label(owner)}")
        # pieces: markers by seat, then this turn's runner, side by side on their space
        spaces: dict[int, list[int | None]] = {
            at: list(seats) for at, seats in self.markers.get(number, {}).items()
        }
        if number in self.runners:
            spaces.setdefault(self.runners[number], []).append(None)
        for space, pieces in sorted(spaces.items()):
            if 1 <= space <= height:
                self.draw_pieces(
                    group, x, base - (space - 0.5) * SPACE_H + 1, number, space, pieces
                )

    def draw_pieces(
        self,
        parent: ET.Element,
        x: float,
        cy: float,
        column: int,
        space: int,
        pieces: Sequence[int | None],
    ) -> None:
        inner_w = COL_W - 2 * SPACE_PAD - 2
        rows = 1 if len(pieces) <= 3 else 2
        per_row = math.ceil(len(pieces) / rows)
        r = min(8.0, inner_w / per_row / 2 - 0.6, (SPACE_H - 6) / rows / 2 - 0.4)
        for i, seat in enumerate(pieces):
            row, col = divmod(i, per_row)
            in_row = min(per_row, len(pieces) - row * per_row)
            px = x + COL_W / 2 + (col - (in_row - 1) / 2) * (inner_w / per_row)
            py = cy + (row - (rows - 1) / 2) * (SPACE_H - 6) / rows
            if seat is None:
                runner_seat = self.current
                piece = _el(
                    parent,
                    "polygon",
                    class_="runner",
                    id=f"runner-{column}",
                    data_seat=runner_seat,
                    data_column=column,
                    data_space=space,
                    points=_triangle(px, py + 0.5, r),
                    fill="#ffffff",
                    stroke="#000000",
                    stroke_width=min(1.8, r / 4),
                    stroke_linejoin="round",
                )
                who = f" ({self.label(runner_seat)})" if runner_seat is not None else ""
                _el(piece, "title", f"runner{who}: column {column}, space {space}")
            else:
                piece = _el(
                    parent,
                    "circle",
                    class_=f"marker seat-{seat}",
                    id=f"marker-{seat}-{column}",
                    data_seat=seat,
                    data_column=column,
                    data_space=space,
                    cx=px,
                    cy=py,
                    r=r,
                    fill=colour_of(seat),
                    stroke=INK,
                    stroke_width=1.2,
                )
                _el(piece, "title", f"{self.label(seat)}: column {column}, space {space}")

    def swatch(
        self, parent: ET.Element, cx: float, cy: float, r: float, seat: int, cls: str
    ) -> ET.Element:
        return _el(
            parent,
            "circle",
            class_=cls,
            data_seat=seat,
            cx=cx,
            cy=cy,
            r=float(r),
            fill=colour_of(seat),
            stroke=INK,
            stroke_width=1.2,
        )

    # ----------------------------------------------------------------------------- legend
    def draw_legend(
        self,
        root: ET.Element,
        x: float,
        y: float,
        width: float,
        name_x: float,
        claimed_x: float,
        tags_x: float,
    ) -> None:
        legend = _el(root, "g", class_="legend")
        _el(
            legend,
            "line",
            x1=float(x),
            y1=float(y),
            x2=x + width,
            y2=float(y),
            stroke=TRACK_STROKE,
            stroke_width=1,
        )
        _el(
            legend,
            "text",
            "Players",
            class_="legend-title",
            x=float(x),
            y=y + 20,
            font_size=TEXT_SIZE + 1,
            font_weight="bold",
            fill=INK,
        )
        y += 26
        for player in self.players:
            seat = int(player["seat"])
            resigned = bool(player.get("resigned"))
            entry = _el(
                legend,
                "g",
                class_="legend-entry" + (" resigned" if resigned else ""),
                id=f"legend-{seat}",
                data_seat=seat,
                data_colour=colour_of(seat),
                data_claimed=len(player.get("claimed") or []),
                data_resigned="true" if resigned else "false",
            )
            cy = y + ROW_H / 2
            baseline = cy + TEXT_SIZE * 0.36
            swatch = self.swatch(entry, x + 9, cy, 8, seat, "legend-swatch")
            if resigned:
                swatch.set("fill-opacity", "0.45")
            is_current = self.current is not None and seat == self.current
            name = player.get("name")
            _el(
                entry,
                "text",
                self.label(seat),
                class_="legend-name",
                data_name=None if name is None else name,
                x=x + name_x,
                y=baseline,
                font_size=TEXT_SIZE,
                font_weight="bold" if is_current else None,
                fill=MUTED if resigned else INK,
            )
            _el(
                entry,
                "text",
                self.legend_claimed(player),
                class_="legend-claimed",
                x=x + claimed_x,
                y=baseline,
                font_size=TEXT_SIZE,
                fill=INK,
            )
            tags = self.legend_tags(player)
            if tags:
                _el(
                    entry,
                    "text",
                    tags,
                    class_="legend-status",
                    x=x + tags_x,
                    y=baseline,
                    font_size=TEXT_SIZE,
                    font_weight="bold" if not resigned else None,
                    fill=MUTED if resigned else INK,
                )
            y += ROW_H
        # the key to the pieces
        y += 14
        key = _el(legend, "g", class_="legend-key")
        cy = y + ROW_H / 2
        baseline = cy + SMALL_SIZE * 0.36
        kx = x
        for i, text in enumerate(KEY_ITEMS):
            if i == 0:
                _el(key, "circle", cx=kx + 8, cy=cy, r=7.0, fill="#9a9a9a", stroke=INK)
            elif i == 1:
                _el(
                    key,
                    "polygon",
                    points=_triangle(kx + 8, cy + 0.5, 7),
                    fill="#ffffff",
                    stroke="#000000",
                    stroke_width=1.8,
                    stroke_linejoin="round",
                )
            else:
                _el(
                    key,
                    "polygon",
                    points=_star(kx + 8, cy, 9, 3.8),
                    fill="#9a9a9a",
                    stroke=INK,
                    stroke_linejoin="round",
                )
            _el(key, "text", text, x=kx + 22, y=baseline, font_size=SMALL_SIZE, fill=MUTED)
            kx += 22 + _key_width(text) + KEY_GAP
