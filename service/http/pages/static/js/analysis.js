// Luck and play (GET /v1/games/{id}/analysis, docs/analysis.md), drawn: each seat's winning
// chance over the versions (in solitaire, the turns expected to finish), with the luckiest and
// unluckiest rolls and the costliest decisions marked, each a link to its version; per seat the
// sums (luck, skill lost, drift), and every point of the chart again as a table, for screen
// readers and for anyone who wants the figures.

import { ApiError } from "./api.js";
import { PALETTE } from "./board.js";
import { h, s } from "./dom.js";

const W = 640;
const H = 260;
const LEFT = 52;
const RIGHT = W - 16;
const TOP = 14;
const BOTTOM = H - 40;
const COSTLY = 3; // decisions marked: the costliest, as long as they lost something

function name(names, seat) {
  return names[seat] ?? `Seat ${seat}`;
}

/** A value as the chart shows it: a chance in percent, or turns still to take. */
function shown(kind, value) {
  return kind === "turns" ? -value : 100 * value;
}

function figure(kind, value) {
  return kind === "turns" ? `${(-value).toFixed(1)} turns` : `${(100 * value).toFixed(1)} %`;
}

function change(kind, delta) {
  const sign = delta >= 0 ? "+" : "−";
  const size = Math.abs(delta);
  return kind === "turns"
    ? `${sign}${size.toFixed(2)} turns`
    : `${sign}${(100 * size).toFixed(1)} points`;
}

function describeAction(action) {
  if (action.type === "move") return `move ${action.sums.join(" and ")}`;
  return action.type === "timeout" ? "let the clock run out" : action.type;
}

/** The marks: luckiest and unluckiest roll, costliest decisions (with what to say of each). */
function marks(analysis, names) {
  const { kind } = analysis;
  const found = [];
  const rolls = [...analysis.rolls].sort((a, b) => b.luck - a.luck);
  if (rolls.length) {
    const best = rolls[0];
    const worst = rolls[rolls.length - 1];
    found.push({
      kind: "lucky",
      version: best.version,
      seat: best.seat,
      value: best.value_after,
      text: `Luckiest roll: ${name(names, best.seat)} rolled ${best.dice.join(", ")} at version ${best.version} (${change(kind, best.luck)})`,
    });
    if (worst !== best) {
      found.push({
        kind: "unlucky",
        version: worst.version,
        seat: worst.seat,
        value: worst.value_after,
        text: `Unluckiest roll: ${name(names, worst.seat)} rolled ${worst.dice.join(", ")} at version ${worst.version} (${change(kind, worst.luck)})`,
      });
    }
  }
  const costly = analysis.decisions
    .filter((d) => d.loss > 1e-9)
    .sort((a, b) => b.loss - a.loss)
    .slice(0, COSTLY);
  for (const d of costly) {
    found.push({
      kind: "costly",
      version: d.version,
      seat: d.seat,
      value: d.value_chosen,
      text: `Costly decision: ${name(names, d.seat)} chose to ${describeAction(d.chosen)} at version ${d.version}; the expert would ${describeAction(d.best)} (${change(kind, -d.loss)})`,
    });
  }
  return found;
}

function chart(analysis, names, link) {
  const { kind } = analysis;
  const points = analysis.values;
  const last = Math.max(analysis.version, 2);
  let low = 0;
  let high = kind === "turns" ? 1 : 100;
  for (const p of points) {
    low = Math.min(low, shown(kind, p.value));
    high = Math.max(high, shown(kind, p.value));
  }
  const x = (version) => LEFT + ((version - 1) / (last - 1)) * (RIGHT - LEFT);
  const y = (value) => BOTTOM - ((shown(kind, value) - low) / (high - low || 1)) * (BOTTOM - TOP);
  const title =
    kind === "turns"
      ? "Turns to finish, as the expert expects them, by version"
      : "Winning chances, as the expert judges them, by version";
  const seats = analysis.seats.map((seat) => seat.seat);
  const summary = seats
    .map((seat) => {
      const own = points.filter((p) => p.seat === seat);
      return own.length ? `${name(names, seat)} ends at ${figure(kind, own[own.length - 1].value)}` : "";
    })
    .filter(Boolean)
    .join("; ");
  const svg = s("svg", {
    class: "chart analysis-chart",
    viewBox: `0 0 ${W} ${H}`,
    // a figure, not an image: its marks are links (an image may hold nothing interactive)
    role: "figure",
    "aria-label": `${title}. ${summary}. The table below holds every point.`,
  });
  // grid and axes: ticks at round figures (a step of 1, 2 or 5 times a power of ten)
  const raw = (high - low) / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((m) => m >= raw);
  for (let value = Math.ceil(low / step) * step; value <= high + 1e-9; value += step) {
    const at = BOTTOM - ((value - low) / (high - low || 1)) * (BOTTOM - TOP);
    svg.append(
      s("line", { class: "chart-grid", x1: LEFT, x2: RIGHT, y1: at, y2: at }),
      s("text", { class: "chart-tick", x: LEFT - 6, y: at + 5, "text-anchor": "end", text: kind === "turns" ? value.toFixed(0) : `${value.toFixed(0)}%` }),
    );
  }
  svg.append(
    s("line", { class: "chart-axis", x1: LEFT, x2: RIGHT, y1: BOTTOM, y2: BOTTOM }),
    s("text", { class: "chart-tick", x: LEFT, y: BOTTOM + 18, "text-anchor": "start", text: "1" }),
    s("text", { class: "chart-tick", x: RIGHT, y: BOTTOM + 18, "text-anchor": "end", text: String(last) }),
    s("text", { class: "chart-title", x: (LEFT + RIGHT) / 2, y: H - 6, "text-anchor": "middle", text: "Version" }),
  );
  for (const seat of seats) {
    const own = points.filter((p) => p.seat === seat);
    if (!own.length) continue;
    svg.append(
      s("polyline", {
        class: "analysis-line",
        "data-seat": seat,
        stroke: PALETTE[seat % PALETTE.length][0],
        points: own.map((p) => `${x(p.version).toFixed(1)},${y(p.value).toFixed(1)}`).join(" "),
      }),
    );
  }
  const found = marks(analysis, names);
  for (const mark of found) {
    const cx = x(mark.version);
    const cy = y(mark.value);
    const shape =
      mark.kind === "costly"
        ? s("rect", { x: cx - 5, y: cy - 5, width: 10, height: 10, transform: `rotate(45 ${cx} ${cy})` })
        : s("path", {
            d:
              mark.kind === "lucky"
                ? `M ${cx} ${cy - 7} L ${cx + 7} ${cy + 5} L ${cx - 7} ${cy + 5} Z`
                : `M ${cx} ${cy + 7} L ${cx + 7} ${cy - 5} L ${cx - 7} ${cy - 5} Z`,
          });
    shape.setAttribute("class", `analysis-mark ${mark.kind}`);
    svg.append(
      s("a", { href: link(mark.version), class: "analysis-link", "aria-label": mark.text },
        s("title", { text: mark.text }), shape),
    );
  }
  return { svg, found, title };
}

function seatTable(analysis, names) {
  const { kind } = analysis;
  return h(
    "table",
    { class: "figures analysis-seats" },
    h("caption", { text: "Luck and play, per player" }),
    h("thead", {}, h("tr", {}, ...["Player", "Start", "End", "Luck", "Skill lost", "Drift", "Decisions", "Blunders"].map((t) => h("th", { scope: "col", text: t })))),
    h(
      "tbody",
      {},
      ...analysis.seats.map((seat) =>
        h(
          "tr",
          {},
          h("th", { scope: "row", text: name(names, seat.seat) }),
          h("td", { text: figure(kind, seat.value_start) }),
          h("td", { text: figure(kind, seat.value_end) }),
          h("td", { text: change(kind, seat.luck) }),
          h("td", { text: change(kind, -seat.skill_loss) }),
          h("td", { text: change(kind, seat.drift) }),
          h("td", { text: String(seat.decisions) }),
          h("td", { text: String(seat.blunders) }),
        ),
      ),
    ),
  );
}

function pointsTable(analysis, names, title) {
  const { kind } = analysis;
  const seats = analysis.seats.map((seat) => seat.seat);
  const byVersion = new Map();
  for (const p of analysis.values) {
    if (!byVersion.has(p.version)) byVersion.set(p.version, new Map());
    byVersion.get(p.version).set(p.seat, p.value);
  }
  return h(
    "details",
    { class: "chart-figures" },
    h("summary", { text: "Every point of the chart, as a table" }),
    h(
      "table",
      { class: "figures analysis-points" },
      h("caption", { text: title }),
      h("thead", {}, h("tr", {}, h("th", { scope: "col", text: "Version" }), ...seats.map((seat) => h("th", { scope: "col", text: name(names, seat) })))),
      h(
        "tbody",
        {},
        ...[...byVersion.entries()].map(([version, values]) =>
          h(
            "tr",
            {},
            h("th", { scope: "row", text: String(version) }),
            ...seats.map((seat) => h("td", { text: values.has(seat) ? figure(kind, values.get(seat)) : "" })),
          ),
        ),
      ),
    ),
  );
}

const GIVE_UP_MS = 10 * 60 * 1000; // a job is done or failed well before (docs/analysis.md)
let asking = 0; // the latest showAnalysis: an earlier one still polling stops drawing

/** The analysis once kept. The server works it out as a job (contract 1.3): while it is queued
 * or running (202), ``onWait`` is told how it stands, and it is asked for again after the
 * answer's Retry-After. Any other answer than 200 is an ApiError, as api() gives it. */
async function keptAnalysis(gameId, upto, onWait, still) {
  const started = Date.now();
  const query = upto === null ? "" : `?version=${upto}`;
  for (;;) {
    let response;
    try {
      response = await fetch(`/v1/games/${gameId}/analysis${query}`, {
        headers: { Accept: "application/json" },
        cache: "no-store",
        credentials: "omit",
      });
    } catch {
      throw new ApiError(0, { code: "offline", detail: "The server cannot be reached; try again." });
    }
    const data = await response.json().catch(() => null);
    if (response.status === 200) return data;
    if (response.status !== 202 || data === null) {
      throw new ApiError(response.status, data || { detail: response.statusText });
    }
    if (!still()) return null;
    onWait(data);
    if (Date.now() - started > GIVE_UP_MS) {
      throw new ApiError(202, { detail: "the analysis is taking too long; reload the page to ask again" });
    }
    const seconds = Math.min(30, Math.max(1, Number(response.headers.get("Retry-After")) || 2));
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    if (!still()) return null;
  }
}

/** Fill ``box`` with the analysis of the game (``link(version)``: where a mark leads), up to
 * version ``upto`` (null: the whole game, or as far as it has gone). */
export async function showAnalysis(box, gameId, names, link, upto = null) {
  const mine = ++asking;
  const still = () => mine === asking;
  const status = h("p", { class: "muted", role: "status", text: "The expert is looking at the game…" });
  box.replaceChildren(status);
  let analysis;
  try {
    analysis = await keptAnalysis(
      gameId,
      upto,
      (job) => {
        status.textContent =
          job.status === "running"
            ? `Analysis running: ${Math.round(100 * job.progress)}%`
            : "Analysis queued: the expert will look at the game shortly";
      },
      still,
    );
  } catch (e) {
    if (still()) box.replaceChildren(h("p", { class: "muted", text: `No analysis: ${e.detail || e.message}` }));
    return;
  }
  if (analysis === null || !still()) return;
  const { svg, found, title } = chart(analysis, names, link);
  const legend = h(
    "ul",
    { class: "analysis-legend" },
    ...analysis.seats.map((seat) =>
      h(
        "li",
        {},
        s("svg", { class: "swatch", width: 14, height: 14, viewBox: "0 0 14 14", "aria-hidden": "true" },
          s("rect", { width: 14, height: 14, fill: PALETTE[seat.seat % PALETTE.length][0] })),
        ` ${name(names, seat.seat)}`,
      ),
    ),
    h("li", {}, "▲ luckiest roll, ▼ unluckiest roll, ◆ costliest decisions"),
  );
  const list = h(
    "ul",
    { class: "analysis-marks" },
    ...found.map((mark) => h("li", { class: mark.kind }, h("a", { href: link(mark.version), text: mark.text }))),
  );
  box.replaceChildren(
    svg,
    legend,
    found.length ? list : h("p", { class: "muted", text: "Nothing to mark yet." }),
    h("p", { class: "hint scroll-hint", text: "The table scrolls sideways: Luck, Skill lost, Drift, Decisions and Blunders follow." }),
    h("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": "Luck and play, per player (scrolls sideways)" }, seatTable(analysis, names)),
    pointsTable(analysis, names, title),
    h("p", { class: "hint" }, "The values are the expert's; docs/analysis.md explains them. Offline: ", h("code", { text: "cantstop analyse EXPORT" }), "."),
  );
}
