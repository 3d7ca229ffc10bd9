// The board, drawn in the page from a state (the same look as GET /v1/games/{id}/board.svg:
// service/render/board_svg.py's colour-blind-safe palette, tracks, markers, runners and stars),
// sized for any screen. Each column is an image whose accessible name says what is on it, so a
// screen reader (and a test) reads the same board a sighted player sees.

import { h, s } from "./dom.js";

// Okabe & Ito's palette, by seat: fill, its name, and the text colour on that fill.
export const PALETTE = [
  ["#0072B2", "blue", "#ffffff"],
  ["#E69F00", "orange", "#1a1a1a"],
  ["#009E73", "green", "#ffffff"],
  ["#CC79A7", "pink", "#1a1a1a"],
  ["#56B4E9", "sky blue", "#1a1a1a"],
  ["#D55E00", "vermilion", "#ffffff"],
  ["#F0E442", "yellow", "#1a1a1a"],
  ["#3A3A3A", "dark grey", "#ffffff"],
];
const INK = "#1f1f1f";
const MUTED = "#5f5a50";
const TRACK_FILL = "#ece3cf";
const TRACK_STROKE = "#bfb193";
const SPACE_STROKE = "#c6baa0";
const RUNNER_SPACE = "#fff1b8";
const SPACE_NUMBER_INK = "#8a8170";

const COL_W = 46;
const COL_GAP = 8;
const SPACE_H = 30;
const SPACE_PAD = 4;
const LABEL_R = 14;
const CAP_H = 30;
const MARGIN = 6;

export function colourOf(seat) {
  return PALETTE[seat % PALETTE.length][0];
}

export function colourName(seat) {
  return PALETTE[seat % PALETTE.length][1];
}

/** "Ann (seat 0)", or "open seat 2". */
export function playerLabel(state, seat) {
  const player = state.players.find((p) => p.seat === seat);
  if (!player || player.name === null) return `open seat ${seat}`;
  return `${player.name} (seat ${seat})`;
}

function positions(map) {
  return Object.entries(map || {}).map(([c, at]) => [Number(c), Number(at)]);
}

/** The accessible name of one column: what a player would say looking at it. */
export function columnText(state, column) {
  const number = column.column;
  const head = `Column ${number} (${column.height} spaces)`;
  if (column.claimed_by !== null && column.claimed_by !== undefined) {
    return `${head}: claimed by ${playerLabel(state, column.claimed_by)}`;
  }
  const parts = [];
  for (const player of state.players) {
    const at = (player.markers || {})[String(number)];
    if (at) parts.push(`${playerLabel(state, player.seat)} at ${at}`);
  }
  const runner = state.turn ? (state.turn.runners || {})[String(number)] : undefined;
  if (runner) parts.push(`runner at ${runner}`);
  return `${head}: ${parts.length ? parts.join(", ") : "empty"}`;
}

function star(cx, cy, outer, inner) {
  const points = [];
  for (let i = 0; i < 10; i++) {
    const r = i % 2 ? inner : outer;
    const a = -Math.PI / 2 + (i * Math.PI) / 5;
    points.push(`${(cx + r * Math.cos(a)).toFixed(2)},${(cy + r * Math.sin(a)).toFixed(2)}`);
  }
  return points.join(" ");
}

function triangle(cx, cy, r) {
  return [
    [cx, cy - r],
    [cx + r * 0.95, cy + r * 0.75],
    [cx - r * 0.95, cy + r * 0.75],
  ]
    .map(([x, y]) => `${x.toFixed(2)},${y.toFixed(2)}`)
    .join(" ");
}

/**
 * The board at ``state`` as an <svg>. ``highlight``: columns to outline (a move being considered).
 */
export function drawBoard(state, { highlight = [] } = {}) {
  const columns = state.columns || [];
  const maxHeight = Math.max(0, ...columns.map((c) => c.height));
  const width = columns.length * (COL_W + COL_GAP) - COL_GAP + 2 * MARGIN;
  const base = MARGIN + CAP_H + maxHeight * SPACE_H + SPACE_PAD; // bottom edge of the spaces
  const height = base + SPACE_PAD + 6 + 2 * LABEL_R + MARGIN + 4;
  const runners = new Map(state.turn ? positions(state.turn.runners) : []);
  const current = state.turn ? state.turn.player : null;
  const markers = new Map(); // column -> Map(space -> [seats])
  for (const player of state.players) {
    for (const [column, at] of positions(player.markers)) {
      if (!markers.has(column)) markers.set(column, new Map());
      const spaces = markers.get(column);
      if (!spaces.has(at)) spaces.set(at, []);
      spaces.get(at).push(player.seat);
    }
  }
  const svg = s("svg", {
    class: "board",
    viewBox: `0 0 ${width} ${height}`,
    role: "group",
    "aria-label": `Board at version ${state.version}`,
    "data-version": state.version,
  });
  columns.forEach((column, i) => {
    const x = MARGIN + i * (COL_W + COL_GAP);
    svg.append(drawColumn(state, column, x, base, runners, markers, current, highlight));
  });
  return svg;
}

function drawColumn(state, column, x, base, runners, markers, current, highlight) {
  const number = column.column;
  const h = column.height;
  const owner = column.claimed_by ?? null;
  const colour = owner === null ? null : colourOf(owner);
  const lit = highlight.includes(number);
  const group = s("g", {
    class: `column${owner === null ? "" : " claimed"}${lit ? " highlight" : ""}`,
    role: "img",
    "aria-label": columnText(state, column),
    "data-column": number,
  });
  const top = base - h * SPACE_H;
  group.append(
    s("rect", {
      class: "track",
      x,
      y: top - SPACE_PAD,
      width: COL_W,
      height: h * SPACE_H + 2 * SPACE_PAD,
      rx: 9,
      fill: colour ? "#ffffff" : TRACK_FILL,
      stroke: lit ? INK : colour || TRACK_STROKE,
      "stroke-width": lit ? 3.5 : colour ? 3 : 1.2,
      "stroke-dasharray": lit ? "6 3" : null,
    }),
  );
  const spaces = markers.get(number) || new Map();
  const runner = runners.get(number);
  for (let space = 1; space <= h; space++) {
    const isTop = space === h;
    let fill = runner === space ? RUNNER_SPACE : "#ffffff";
    let opacity = null;
    if (colour) [fill, opacity] = [colour, isTop ? 0.65 : 0.28];
    group.append(
      s("rect", {
        class: "space",
        x: x + SPACE_PAD,
        y: base - space * SPACE_H + 2,
        width: COL_W - 2 * SPACE_PAD,
        height: SPACE_H - 4,
        rx: 5,
        fill,
        "fill-opacity": opacity,
        stroke: colour || SPACE_STROKE,
        "stroke-width": 1,
      }),
    );
    if (!spaces.has(space) && runner !== space) {
      group.append(
        s(
          "text",
          {
            class: "space-number",
            x: x + COL_W / 2,
            y: base - (space - 0.5) * SPACE_H + 4.2,
            "font-size": 9,
            "text-anchor": "middle",
            fill: owner === null ? SPACE_NUMBER_INK : MUTED,
            "aria-hidden": "true",
          },
          String(space),
        ),
      );
    }
  }
  const cx = x + COL_W / 2;
  const cy = base + SPACE_PAD + 6 + LABEL_R;
  group.append(
    s("circle", {
      cx,
      cy,
      r: LABEL_R,
      fill: colour || "#ffffff",
      stroke: colour || TRACK_STROKE,
      "stroke-width": 1.5,
    }),
    s(
      "text",
      {
        class: "column-label",
        x: cx,
        y: cy + 5,
        "font-size": 14,
        "font-weight": "bold",
        "text-anchor": "middle",
        fill: owner === null ? INK : PALETTE[owner % PALETTE.length][2],
        "aria-hidden": "true",
      },
      String(number),
    ),
  );
  if (owner !== null) {
    group.append(
      s("polygon", {
        class: "claim-star",
        points: star(cx, top - SPACE_PAD - 14, 11, 4.6),
        fill: colour,
        stroke: INK,
        "stroke-width": 1,
        "stroke-linejoin": "round",
      }),
    );
  }
  // pieces: markers by seat, then this turn's runner, side by side on their space
  const pieces = new Map([...spaces].map(([at, seats]) => [at, [...seats]]));
  if (runner !== undefined) {
    if (!pieces.has(runner)) pieces.set(runner, []);
    pieces.get(runner).push(null);
  }
  for (const [space, list] of [...pieces].sort((a, b) => a[0] - b[0])) {
    if (space >= 1 && space <= h) {
      drawPieces(group, x, base - (space - 0.5) * SPACE_H + 1, list, current);
    }
  }
  return group;
}

function drawPieces(group, x, cy, pieces, current) {
  const innerW = COL_W - 2 * SPACE_PAD - 2;
  const rows = pieces.length <= 3 ? 1 : 2;
  const perRow = Math.ceil(pieces.length / rows);
  const r = Math.min(8, innerW / perRow / 2 - 0.6, (SPACE_H - 6) / rows / 2 - 0.4);
  pieces.forEach((seat, i) => {
    const row = Math.floor(i / perRow);
    const col = i % perRow;
    const inRow = Math.min(perRow, pieces.length - row * perRow);
    const px = x + COL_W / 2 + (col - (inRow - 1) / 2) * (innerW / perRow);
    const py = cy + (row - (rows - 1) / 2) * ((SPACE_H - 6) / rows);
    if (seat === null) {
      group.append(
        s("polygon", {
          class: "runner",
          "data-seat": current,
          points: triangle(px, py + 0.5, r),
          fill: "#ffffff",
          stroke: "#000000",
          "stroke-width": Math.min(1.8, r / 4),
          "stroke-linejoin": "round",
        }),
      );
    } else {
      group.append(
        s("circle", {
          class: "marker",
          "data-seat": seat,
          cx: px,
          cy: py,
          r,
          fill: colourOf(seat),
          stroke: INK,
          "stroke-width": 1.2,
        }),
      );
      if (r >= 6) {
        // the seat's number on its marker: the colour is not the only clue
        group.append(
          s(
            "text",
            {
              x: px,
              y: py + r * 0.42,
              "font-size": r * 1.2,
              "font-weight": "bold",
              "text-anchor": "middle",
              fill: PALETTE[seat % PALETTE.length][2],
              "aria-hidden": "true",
            },
            String(seat),
          ),
        );
      }
    }
  });
}

/** A small disc in a seat's colour, with its number (for lists of players). */
export function swatch(seat) {
  return s(
    "svg",
    { class: "swatch", viewBox: "0 0 20 20", width: 20, height: 20, "aria-hidden": "true" },
    s("circle", { cx: 10, cy: 10, r: 9, fill: colourOf(seat), stroke: INK, "stroke-width": 1.2 }),
    s(
      "text",
      {
        x: 10,
        y: 14,
        "font-size": 11,
        "font-weight": "bold",
        "text-anchor": "middle",
        fill: PALETTE[seat % PALETTE.length][2],
      },
      String(seat),
    ),
  );
}

/** A player in a list: colour, name and seat, tags (you, computer, to play, resigned, winner)
 * and the columns claimed (of those needed, in a game of several players). */
export function playerItem(state, p, { you = false } = {}) {
  const tags = [];
  if (you) tags.push("you");
  if (p.bot) tags.push(`computer: ${p.bot}`);
  if (state.turn && state.turn.player === p.seat) tags.push("to play");
  if (p.resigned) tags.push("resigned");
  if (state.status === "finished" && state.winner === p.seat) tags.push("winner");
  const claimed = p.claimed.length ? `claimed ${p.claimed.join(", ")}` : "no column claimed";
  const of = state.solitaire ? "" : ` (${p.claimed.length} of ${state.rules.columns_to_win})`;
  return h(
    "li",
    { class: "player" },
    swatch(p.seat),
    h(
      "span",
      { class: "player-name" },
      h("strong", {}, p.name === null ? "Open seat" : p.name),
      ` (seat ${p.seat}, ${colourName(p.seat)})`,
    ),
    tags.map((t) => h("span", { class: "tag" }, t)),
    p.name === null ? null : h("span", { class: "claimed" }, claimed + of),
  );
}
