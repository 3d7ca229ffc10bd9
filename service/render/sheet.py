"""The turn record sheet rendered for ``GET /v1/games/{id}/record-sheet``: text, CSV, JSON and PDF.

The sheet itself comes from ``domain.record_sheet.record_sheet``; these functions only lay it out.
Text and CSV follow api-contract.md (Record sheets); JSON and PDF are this service's design.
"""

from __future__ import annotations

import copy
import csv
import io
from collections.abc import Callable
from functools import cache
from typing import Any
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFError, TTFont
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import (
    Flowable,
    KeepTogether,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from domain.record_sheet import TIMES, RecordSheet, SheetRow, one_line, row_text

CSV_HEADER = ("turn", "result", "progress", "wiped", "captured", "claimed_total")
JSON_FORMAT = "cantstop-record-sheet"
RATINGS = {
    "easy": ("30 turns or fewer: Target met", "more than 30: Try again"),
    "advanced": (
        "30 or fewer: Outstanding \u00b7 31\u201335: Excellent",
        "36\u201340: Very Good \u00b7 more than 40: Try again",
    ),
}
MIN_BLANK_ROWS = 20
"""A multiplayer sheet (no target) still offers this many numbered rows, like a paper pad."""


def _turns(n: int) -> str:
    return f"{n} turn" if n == 1 else f"{n} turns"


# How a game of several players ended without a winner, where the reason says more than that.
NO_WINNER = {
    "abandoned": "Abandoned: no winner",  # nothing recorded for too long
    "aborted": "Aborted: no winner, not rated",  # a rated game ended before all had played
}


def result_lines(sheet: RecordSheet) -> list[str]:
    """What a finished sheet says at the bottom: the score and rating, or how the game ended."""
    if not sheet["finished"]:
        return []
    if sheet["score"] is not None:
        lines = [f"Score: {_turns(sheet['score'])}"]
        if sheet["rating"]:
            lines.append(f"Rating: {sheet['rating']}")
        return lines
    if sheet["mode"]:
        ended = "Abandoned" if sheet["finish_reason"] == "abandoned" else "Resigned"
        return [f"{ended} after {_turns(sheet['turns'])}: no score"]
    if sheet["winner"]:
        return [f"Winner: {sheet['winner']}"]
    return [NO_WINNER.get(str(sheet["finish_reason"]), "No winner")]


# ----------------------------------------------------------------------------- text, CSV, JSON
def render_text(sheet: RecordSheet) -> str:
    """The title line, ``N. ROW`` per completed turn, then the score and rating when finished."""
    lines = [sheet["title"]]
    lines += [f"{row['turn']}. {row['text']}".rstrip() for row in sheet["rows"]]
    lines += result_lines(sheet)
    return "\n".join(lines) + "\n"


def _columns(columns: list[int]) -> str:
    return " ".join(map(str, columns))


def csv_cells(row: SheetRow) -> list[str | int]:
    """A row's CSV cells: progress as ``4×2 8×2``, wiped and captured as ``4 5``."""
    progress = " ".join(f"{c}{TIMES}{n}" for c, n in row["progress"].items())
    return [
        row["turn"],
        row["result"],
        progress,
        _columns(row["wiped"]),
        _columns(row["claimed"]),
        row["claimed_total"],
    ]


def render_csv(sheet: RecordSheet) -> str:
    """``turn,result,progress,wiped,captured,claimed_total``, one line per turn (RFC 4180, CRLF)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_HEADER)
    writer.writerows(csv_cells(row) for row in sheet["rows"])
    return out.getvalue()


def render_json(sheet: RecordSheet) -> dict[str, Any]:
    """The sheet as a JSON document, tagged with its format, plus the text's closing lines."""
    return {
        "format": JSON_FORMAT,
        "format_version": 1,
        **copy.deepcopy(dict(sheet)),
        "result_lines": result_lines(sheet),
    }


# ------------------------------------------------------------------------------------- PDF
FONT, BOLD, OBLIQUE = "Helvetica", "Helvetica-Bold", "Helvetica-Oblique"
UNICODE_FONTS = {
    False: ("DejaVuSans", "DejaVuSans.ttf"),
    True: ("DejaVuSans-Bold", "DejaVuSans-Bold.ttf"),
}
"""Found on reportlab's TTF search path (``/usr/share/fonts/truetype/...`` among others)."""
INK = colors.HexColor("#1f2a44")
RULE = colors.HexColor("#9aa5b8")
SHADE = colors.HexColor("#e8edf5")
CLAIM = colors.HexColor("#cfe3cf")
BUST = colors.HexColor("#8a1c1c")
MUTED = colors.HexColor("#5b6475")
PAGE_MARGIN = 14 * mm
FRAME_PADDING = 6  # SimpleDocTemplate's frame pads its content by 6 points on every side
CONTENT_WIDTH = A4[0] - 2 * (PAGE_MARGIN + FRAME_PADDING)
ROW_HEIGHT = 12.6
MIN_ROW_HEIGHT = 10.0
TABLE_SPACE = 40 * ROW_HEIGHT
"""Room for the turn rows on the first page: 40 rows at full height; a longer game's rows get
narrower down to MIN_ROW_HEIGHT before the table runs on to a second page."""
RATING_LIMITS = {"easy": (30,), "advanced": (30, 35, 40)}
"""Rows under which the turn table draws a heavier rule: the limits of the ratings."""


@cache
def _unicode_font(bold: bool) -> str | None:
    """DejaVu Sans, registered once, when this machine has it; else None."""
    name, path = UNICODE_FONTS[bold]
    try:
        pdfmetrics.registerFont(TTFont(name, path))
    except TTFError:
        return None
    return name


def _font_for(text: str, bold: bool = False) -> str:
    """Helvetica (WinAnsi has × and –) unless ``text`` needs a glyph it lacks and DejaVu is here.

    Without DejaVu the glyphs Helvetica lacks show as boxes.
    """
    try:
        text.encode("cp1252")
    except UnicodeEncodeError:
        font = _unicode_font(bold)
        if font:
            return font
    return BOLD if bold else FONT


def _style(name: str, **kw: Any) -> ParagraphStyle:
    base: dict[str, Any] = {"fontName": FONT, "fontSize": 9, "leading": 11, "textColor": INK}
    return ParagraphStyle(name, **{**base, **kw})


STYLES = {
    "title": _style("title", fontName=BOLD, fontSize=22, leading=26),
    "subtitle": _style("subtitle", fontSize=11, leading=14, textColor=MUTED),
    "label": _style("label", fontSize=7, leading=9, textColor=MUTED),
    "value": _style("value", fontName=BOLD, fontSize=11, leading=14),
    "cell": _style("cell"),
    "bust": _style("bust", textColor=BUST),
    "empty": _style("empty", fontName=OBLIQUE, textColor=MUTED),
    "small": _style("small", fontSize=7.5, leading=9.5, textColor=MUTED),
    "result": _style("result", fontName=BOLD, fontSize=13, leading=17),
}


def _p(text: str, style: str = "cell") -> Paragraph:
    return Paragraph(escape(text), STYLES[style])


def _field(label: str, value: str) -> list[Paragraph]:
    font = _font_for(value, bold=True)
    value_style = STYLES["value"]
    if font != BOLD:
        value_style = ParagraphStyle("value-unicode", parent=value_style, fontName=font)
    return [_p(label.upper(), "label"), Paragraph(escape(value), value_style)]


def _header(sheet: RecordSheet) -> list[Flowable]:
    if sheet["mode"]:
        subtitle = "Solitaire turn record sheet"
        mode = f"{sheet['mode'].capitalize()} solitaire"
        goal = f"All {len(sheet['columns'])} columns in {sheet['target']} turns or fewer"
    else:
        subtitle = "Turn record sheet"
        mode = f"Multiplayer, seat {sheet['seat']}"
        goal = f"First to {sheet['rules'].get('columns_to_win')} columns"
    fields = [
        _field("Player", one_line(sheet["player"])),
        _field("Date", sheet["created_at"][:10]),
        _field("Mode", mode),
        _field("Target", goal),
    ]
    info = Table(
        [[f[0] for f in fields], [f[1] for f in fields]],
        colWidths=["24%", "16%", "22%", "38%"],
    )
    info.setStyle(
        TableStyle(
            [
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("LEFTPADDING", (0, 0), (-1, -1), 0),
                ("BOTTOMPADDING", (0, 0), (-1, 0), 0),
                ("LINEBELOW", (0, -1), (-1, -1), 1.2, INK),
                ("BOTTOMPADDING", (0, -1), (-1, -1), 6),
            ]
        )
    )
    flow: list[Flowable] = [
        _p("CAN'T STOP", "title"),
        _p(subtitle, "subtitle"),
        Spacer(1, 5 * mm),
        info,
    ]
    variants = [
        name.replace("_", " ")
        for name in ("jumping", "forced_move", "steep_hill")
        if sheet["rules"].get(name)
    ]
    if sheet["rules"].get("dice_faces", 6) != 6:
        variants.append(f"{sheet['rules']['dice_faces']}-sided dice")
    if variants:
        flow += [Spacer(1, 2 * mm), _p("Variants: " + ", ".join(variants), "small")]
    return [*flow, Spacer(1, 4 * mm)]


def _row_cell(row: SheetRow | None) -> Paragraph | str:
    """The row's text as on the sheet; a claim's ``C Cap`` in bold, a bust in red."""
    if row is None:
        return ""
    if row["result"] == "bust":
        return _p(row["text"], "bust")
    if not row["text"]:
        return _p("stopped, no marker moved", "empty")
    gains = row_text(row["progress"], [])
    caps = row_text({}, row["claimed"])
    markup = ", ".join([*([escape(gains)] if gains else []), *([f"<b>{caps}</b>"] if caps else [])])
    return Paragraph(markup, STYLES["cell"])


def _turn_table(sheet: RecordSheet) -> Table:
    rows = sheet["rows"]
    target = sheet["target"]
    lines = max(len(rows), target or MIN_BLANK_ROWS)
    data: list[list[Any]] = [
        ["Turn", "Columns advanced (C\u00d7spaces), claimed (Cap), bust (S)", "Held"]
    ]
    for n in range(1, lines + 1):
        row = rows[n - 1] if n <= len(rows) else None
        data.append([str(n), _row_cell(row), "" if row is None else str(row["claimed_total"])])
    table = Table(
        data,
        colWidths=[14 * mm, CONTENT_WIDTH - 32 * mm, 18 * mm],
        rowHeights=[16] + [max(MIN_ROW_HEIGHT, min(ROW_HEIGHT, TABLE_SPACE / lines))] * lines,
        repeatRows=1,
    )
    style: list[tuple[Any, ...]] = [
        ("FONT", (0, 0), (-1, 0), BOLD, 8),
        ("TEXTCOLOR", (0, 0), (-1, 0), colors.white),
        ("BACKGROUND", (0, 0), (-1, 0), INK),
        ("FONT", (0, 1), (0, -1), BOLD, 8.5),
        ("FONT", (2, 1), (2, -1), FONT, 8.5),
        ("TEXTCOLOR", (0, 1), (-1, -1), INK),
        ("ALIGN", (0, 0), (0, -1), "RIGHT"),
        ("ALIGN", (2, 0), (2, -1), "CENTER"),
        ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
        ("TOPPADDING", (0, 0), (-1, -1), 1),
        ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
        ("RIGHTPADDING", (0, 0), (0, -1), 8),
        ("LEFTPADDING", (1, 0), (1, -1), 8),
        ("LINEBELOW", (0, 1), (-1, -1), 0.4, RULE),
        ("LINEAFTER", (0, 0), (1, -1), 0.4, RULE),
        ("BOX", (0, 0), (-1, -1), 1, INK),
    ]
    style += [("BACKGROUND", (0, n), (-1, n), SHADE) for n in range(2, lines + 1, 2)]
    limits = RATING_LIMITS.get(sheet["mode"] or "", ())
    style += [("LINEBELOW", (0, n), (-1, n), 1.1, INK) for n in limits if n < lines]
    table.setStyle(TableStyle(style))
    return table


def _claims_table(sheet: RecordSheet) -> Table:
    """One box per column: shaded, with the turn that claimed it, once the seat holds it."""
    claimed_on = {c: row["turn"] for row in sheet["rows"] for c in row["claimed"]}
    columns = sheet["columns"]
    data = [
        ["Column", *map(str, columns)],
        ["Claimed on turn", *(str(claimed_on.get(c, "")) for c in columns)],
    ]
    first = 30 * mm
    each = (CONTENT_WIDTH - first) / len(columns)
    table = Table(data, colWidths=[first] + [each] * len(columns))
    style: list[tuple[Any, ...]] = [
        ("FONT", (0, 0), (-1, 0), BOLD, 9),
        ("FONT", (0, 1), (-1, 1), FONT, 9),
        ("FONT", (0, 0), (0, -1), BOLD, 7.5),
        ("TEXTCOLOR", (0, 0), (-1, -1), INK),
        ("ALIGN", (1, 0), (-1, -1), "CENTER"),
        ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
        ("GRID", (0, 0), (-1, -1), 0.4, RULE),
        ("BOX", (0, 0), (-1, -1), 1, INK),
        ("BACKGROUND", (0, 0), (-1, 0), SHADE),
    ]
    style += [
        ("BACKGROUND", (i, 1), (i, 1), CLAIM)
        for i, c in enumerate(columns, start=1)
        if c in claimed_on
    ]
    table.setStyle(TableStyle(style))
    return table


def _result(sheet: RecordSheet) -> list[Flowable]:
    if sheet["finished"]:
        lines = result_lines(sheet)
    elif sheet["mode"]:
        lines = ["Score: ________ turns", "Rating: ________________"]
    else:
        lines = []
    score: list[Flowable] = [_p(line, "result") for line in lines]
    if not sheet["mode"]:
        return score
    legend = [
        _p(f"{sheet['mode'].capitalize()} solitaire ratings", "label"),
        *(_p(line, "small") for line in RATINGS[sheet["mode"]]),
        _p(
            "Every turn counts, stop or bust."
            + (" Heavier rules mark the rating limits." if sheet["mode"] == "advanced" else ""),
            "small",
        ),
    ]
    table = Table([[score, legend]], colWidths=[CONTENT_WIDTH * 0.45, CONTENT_WIDTH * 0.55])
    table.setStyle(
        TableStyle(
            [
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("LEFTPADDING", (0, 0), (0, 0), 0),
                ("LINEBEFORE", (1, 0), (1, 0), 0.4, RULE),
            ]
        )
    )
    return [table]


def _footer(sheet: RecordSheet) -> Callable[[Canvas, SimpleDocTemplate], None]:
    """Draws the game id, the version the sheet shows, and the page number on every page."""
    game = f"Game {sheet['game_id']} \u00b7 " if sheet["game_id"] else ""
    text = f"{game}as of event {sheet['version']}"

    def draw(canvas: Canvas, doc: SimpleDocTemplate) -> None:
        canvas.saveState()
        canvas.setFont(FONT, 7)
        canvas.setFillColor(MUTED)
        left, right = PAGE_MARGIN + FRAME_PADDING, A4[0] - PAGE_MARGIN - FRAME_PADDING
        canvas.drawString(left, PAGE_MARGIN / 2, text)
        canvas.drawRightString(right, PAGE_MARGIN / 2, f"Page {doc.page}")
        canvas.restoreState()

    return draw


def render_pdf(sheet: RecordSheet) -> bytes:
    """A printable A4 score sheet: header, the ruled turn table, columns claimed, the result."""
    out = io.BytesIO()
    doc = SimpleDocTemplate(
        out,
        pagesize=A4,
        leftMargin=PAGE_MARGIN,
        rightMargin=PAGE_MARGIN,
        topMargin=PAGE_MARGIN,
        bottomMargin=PAGE_MARGIN,
        title=sheet["title"],
        author="Can't Stop server",
        subject="Turn record sheet",
    )
    story: list[Flowable] = [
        *_header(sheet),
        _turn_table(sheet),
        Spacer(1, 4 * mm),
        KeepTogether([_claims_table(sheet), Spacer(1, 4 * mm), *_result(sheet)]),
    ]
    footer = _footer(sheet)
    doc.build(story, onFirstPage=footer, onLaterPages=footer)
    return out.getvalue()
