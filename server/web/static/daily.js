// The Plot daily pages: /daily (today's board live, the countdown to the day's end, yesterday's
// board with its reveal checked here), /daily/N and /daily/YYYY-MM-DD (one day's board), and
// /player/NAME (a claimed player's days). The boards come from the server's JSON API on this
// origin (docs/daily.md, "The JSON API"); today's board then follows live over the game
// server's WebSocket as a spectator of the day (watch_daily), like `plot board`. Every string
// from the server goes into the page as text (textContent / text nodes), never as HTML.

import { decode, encode } from "./vendor/msgpack/index.mjs";
import { clock, el, num, plural, sha256Hex } from "./dom.js";
import { replayRecord } from "./replay.js";

const WS_URL = document.querySelector('meta[name="plot-ws-url"]').content;
const PROTOCOL_VERSION = 2;
const SPECTATOR_NAME = "web spectator";
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8000;

const dayPath = location.pathname.match(/^\/daily(?:\/(\d{1,9}|\d{4}-\d{2}-\d{2}))?\/?$/);
const playerPath = location.pathname.match(/^\/player\/([^/]+)$/);
const DAY_KEY = dayPath ? dayPath[1] ?? null : null; // null on /daily: today
const PLAYER = playerPath ? safeDecode(playerPath[1]) : null;

function safeDecode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

// ------------------------------------------------------------------ small helpers

function playerLink(row) {
  if (!row.claimed) return el("span", {}, row.name);
  return el("a", { href: `/player/${encodeURIComponent(row.name)}` }, row.name);
}

function dateText(ms) {
  return new Date(num(ms)).toISOString().slice(0, 10);
}

// ------------------------------------------------------------------ the JSON API

/** A JSON answer of the API. A deal is a 64-bit number, more than a JS number holds exactly:
 * every "deal" is read from its digits as a string before parsing. */
async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  const text = await response.text();
  if (!response.ok) {
    let message = text.trim();
    try {
      const parsed = JSON.parse(text);
      message = parsed.message || parsed.error || message;
    } catch {
      // a plain-text answer: shown as it is
    }
    const error = new Error(message || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return JSON.parse(text.replace(/"deal":\s*(\d+)/g, '"deal":"$1"'));
}

/** One day as the page holds it: its facts (number, date, times, commitment) and its board. */
function dayOf(answer) {
  const facts = answer.day && typeof answer.day === "object" ? answer.day : answer;
  const board = answer.board && typeof answer.board === "object" ? answer.board : answer;
  return {
    day: num(facts.day ?? board.day),
    date: facts.date ?? board.date ?? null,
    startsAt: facts.starts_at ?? board.starts_at ?? null,
    endsAt: facts.ends_at ?? board.ends_at ?? null,
    commitment: facts.commitment ?? board.commitment ?? null,
    timeLimitS: facts.time_limit_s ?? null,
    rows: board.rows ?? [],
    final: Boolean(board.final),
    deal: board.deal ?? null,
    salt: board.salt ?? null,
    records: board.records ?? null,
  };
}

/** The moves of ``row``'s record among the day's revealed records (name -> moves; the deal is the day's). */
function movesOf(day, row) {
  const records = day.records;
  if (!records) return null;
  const record = Object.hasOwn(records, row.name) ? records[row.name] : null;
  if (Array.isArray(record)) return record;
  return record && Array.isArray(record.moves) ? record.moves : null;
}

// ------------------------------------------------------------------ state

const state = {
  offsetMs: 0, // server clock minus ours (from the socket's welcome)
  today: null,
  yesterday: null,
  day: null, // the one day a /daily/N page shows
  player: null,
  standing: null, // the all-days standing board (/api/board)
  problem: null,
  live: false,
};

function serverNow() {
  return Date.now() + state.offsetMs;
}

const conn = document.getElementById("conn");

function setConn(text, kind) {
  conn.textContent = text;
  conn.dataset.state = kind;
}

// ------------------------------------------------------------------ the board

function boardTable(id, day, { verify = false } = {}) {
  const headers = [["Rank", "num"], ["Player", ""], ["Status", ""], ["Cards home", "num"], ["Moves", "num"], ["Time", "num"]];
  if (verify) headers.push(["Replayed here", ""]);
  const body = el("tbody", { id: `${id}-body` });
  for (const row of day.rows) {
    const cells = [
      el("td", { className: "num" }, num(row.rank)),
      el("td", { className: "name" }, playerLink(row), row.claimed ? el("span", { className: "claimed", title: "a claimed name" }, " ✓") : null),
      el("td", { className: `status-${row.status}` }, row.status),
      el("td", { className: "num" }, num(row.cards)),
      el("td", { className: "num" }, num(row.moves)),
      el("td", { className: "num" }, clock(row.elapsed_ms)),
    ];
    if (verify) cells.push(el("td", { className: "agree", "data-ok": "unknown" }, "…"));
    body.append(el("tr", { "data-name": row.name, "data-rank": String(num(row.rank)) }, ...cells));
  }
  const caption = day.final ? `Final board · ${plural(day.rows.length, "player")}` : `Live board · ${plural(day.rows.length, "player")} so far`;
  const table = el("table", { id, className: "dailyboard" },
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, ...headers.map(([label, cls]) => el("th", { scope: "col", className: cls || null }, label)))),
    body);
  const empty = day.rows.length ? null : el("p", { className: "muted", id: `${id}-empty` }, day.final ? "Nobody played this day." : "Nobody has finished an attempt yet today.");
  return el("div", { className: "tablewrap" }, table, empty);
}

/** The reveal of a day that is over: the commitment checked in this browser (Web Crypto), and
 * every record replayed here to the cards its row says. */
function revealSection(id, day) {
  const verdict = el("p", { className: "verdict", id: `${id}-verdict` }, "Checking the commitment…");
  const section = el("section", { id, className: "reveal", "aria-label": "the reveal" },
    el("h3", {}, "The reveal: the deal was fixed before the day began"),
    el("p", {}, "Deal ", el("code", { className: "deal" }, String(day.deal)), " · salt ", el("code", { className: "salt" }, String(day.salt))),
    el("p", {}, "Commitment published with the day: ", el("code", { className: "commitment" }, String(day.commitment))),
    verdict,
    el("p", { className: "muted" }, "Check it yourself: ",
      el("code", {}, `plot board ${day.day} --server ${WS_URL}`), " replays every record on show and checks the deal against the commitment."));
  check(day, verdict);
  return section;
}

async function check(day, verdict) {
  if (!(globalThis.crypto && crypto.subtle)) {
    verdict.dataset.ok = "unknown";
    verdict.textContent = "This browser offers SHA-256 only on https:// or localhost pages, so it cannot check the commitment here: run the plot board line below.";
    return;
  }
  const actual = await sha256Hex(`the-plot:${day.deal}:${day.salt}`);
  const ok = actual === String(day.commitment).toLowerCase();
  verdict.dataset.ok = String(ok);
  verdict.textContent = ok
    ? "✓ Verified in this browser: SHA-256 of “the-plot:<deal>:<salt>” equals the commitment published before the day."
    : `✗ NOT verified: SHA-256 of “the-plot:<deal>:<salt>” is ${actual}, not the commitment.`;
}

/** Each row's record replayed (replay.js) on the revealed deal: do its cards home agree? */
function replayRows(tableId, day) {
  const rows = document.querySelectorAll(`#${tableId}-body tr`);
  day.rows.forEach((row, index) => {
    const cell = rows[index] && rows[index].querySelector("td.agree");
    if (!cell) return;
    const moves = movesOf(day, row);
    if (!moves) {
      cell.textContent = "no record";
      return;
    }
    try {
      const { cardsHome } = replayRecord(day.deal, moves);
      const ok = cardsHome === num(row.cards);
      cell.dataset.ok = String(ok);
      cell.textContent = ok ? `✓ ${cardsHome} home` : `✗ ${cardsHome} home, not ${num(row.cards)}`;
    } catch (error) {
      cell.dataset.ok = "false";
      cell.textContent = `✗ ${error.message}`;
    }
  });
}

function daySection(id, title, day, { live = false } = {}) {
  const over = day.final && day.deal !== null && day.deal !== undefined;
  const section = el("section", { id, "aria-labelledby": `${id}-title`, "data-day": String(day.day) },
    el("h2", { id: `${id}-title` }, title),
    el("p", { className: "muted" },
      `Day ${day.day}`, day.date ? ` · ${day.date}` : "",
      day.timeLimitS ? ` · time limit ${clock(day.timeLimitS * 1000)}` : "",
      live ? " · live" : ""),
    !over && day.commitment ? el("p", {}, "Commitment (the deal and salt are revealed when the day is over): ", el("code", { className: "commitment" }, String(day.commitment))) : null,
    boardTable(`${id}-board`, day, { verify: over }),
    over ? revealSection(`${id}-reveal`, day) : null);
  return section;
}

/** The all-days standing board (points: docs/daily.md, "The standing board"), its first rows. */
function standingSection(standing) {
  const headers = [["Rank", "num"], ["Player", ""], ["Points", "num"], ["Days played", "num"], ["Days won", "num"], ["Best streak", "num"]];
  const rows = (standing.rows ?? []).map((row) => el("tr", { "data-name": row.name },
    el("td", { className: "num" }, num(row.rank)),
    el("td", { className: "name" }, playerLink({ name: row.name, claimed: true }), el("span", { className: "claimed", title: "a claimed name" }, " ✓")),
    el("td", { className: "num" }, num(row.points)),
    el("td", { className: "num" }, num(row.days_played)),
    el("td", { className: "num" }, num(row.days_won)),
    el("td", { className: "num" }, num(row.best_streak))));
  return el("section", { id: "standing", "aria-labelledby": "standing-title" },
    el("h2", { id: "standing-title" }, "The standing board, all days"),
    el("p", { className: "muted" }, "Points for each finished attempt: its cards home, 100 more for a win, up to 100 more for a fast one. ",
      `${plural(num(standing.total ?? rows.length), "player")} in all.`),
    el("div", { className: "tablewrap" },
      el("table", { id: "standing-table" },
        el("thead", {}, el("tr", {}, ...headers.map(([label, cls]) => el("th", { scope: "col", className: cls || null }, label)))),
        el("tbody", { id: "standing-body" }, ...rows))));
}

// ------------------------------------------------------------------ the pages

const main = document.getElementById("main");

function dayNav(day) {
  const links = [];
  if (day.day > 0) links.push(el("a", { href: `/daily/${day.day - 1}`, id: "prev-day" }, `← day ${day.day - 1}`));
  links.push(el("a", { href: "/daily", id: "today-link" }, "today"));
  if (state.today && day.day < state.today.day) links.push(el("a", { href: `/daily/${day.day + 1}`, id: "next-day" }, `day ${day.day + 1} →`));
  return el("nav", { className: "daynav", "aria-label": "other days" }, ...links);
}

function renderToday() {
  const today = state.today;
  if (state.problem) {
    main.replaceChildren(el("p", { id: "problem", className: "notice bad", role: "alert" }, state.problem));
    return;
  }
  if (!today) return;
  document.title = `The Plot daily · day ${today.day}${today.date ? ` · ${today.date}` : ""}`;
  main.replaceChildren(
    el("div", { className: "dayhead" },
      el("h2", {}, "Today's deal"),
      el("span", { id: "countdown", className: "clock", "aria-label": "time left in the day" }),
      el("span", { className: "muted" }, "left in the day")),
    el("p", { className: "daily-link" }, "Play it once, ranked: ", el("code", { id: "play-command" }, `plot daily --server ${WS_URL}`)),
    daySection("today", "Today's board", today, { live: state.live }),
    state.yesterday ? daySection("yesterday", "Yesterday's board", state.yesterday) : null,
    state.standing ? standingSection(state.standing) : null,
    dayNav(today));
  if (state.yesterday && state.yesterday.final) replayRows("yesterday-board", state.yesterday);
  renderCountdown();
}

function renderCountdown() {
  const node = document.getElementById("countdown");
  if (!node || !state.today || state.today.endsAt === null) return;
  node.textContent = clock(num(state.today.endsAt) - serverNow());
}

function renderDay() {
  if (state.problem) {
    document.title = "The Plot daily";
    main.replaceChildren(el("p", { id: "problem", className: "notice bad", role: "alert" }, state.problem),
      el("p", {}, el("a", { href: "/daily" }, "Today's board")));
    return;
  }
  const day = state.day;
  if (!day) return;
  document.title = `The Plot daily · day ${day.day}${day.date ? ` · ${day.date}` : ""}`;
  const title = day.final ? `Day ${day.day}${day.date ? ` · ${day.date}` : ""}` : `Day ${day.day} (under way)`;
  main.replaceChildren(daySection("day", title, day), dayNav(day));
  if (day.final) replayRows("day-board", day);
}

function renderPlayer() {
  if (state.problem) {
    document.title = "The Plot daily";
    main.replaceChildren(el("p", { id: "problem", className: "notice bad", role: "alert" }, state.problem),
      el("p", {}, el("a", { href: "/daily" }, "Today's board")));
    return;
  }
  const player = state.player;
  if (!player) return;
  document.title = `${player.name} · The Plot daily`;
  const stat = (label, figure, id) => el("li", { id }, el("span", { className: "figure" }, figure), el("span", { className: "label" }, label));
  const rating = player.rating;
  const ratingText = rating === null || rating === undefined ? "-"
    : typeof rating === "object" ? String(rating.shown ?? rating.figure ?? Math.round(num(rating.mu ?? 0))) : String(rating);
  const history = (player.history ?? []).slice().sort((a, b) => num(b.day) - num(a.day));
  const rows = history.map((result) => el("tr", { "data-day": String(num(result.day)) },
    el("td", {}, el("a", { href: `/daily/${num(result.day)}` }, result.date ?? `day ${num(result.day)}`)),
    el("td", { className: "num" }, result.rank === null || result.rank === undefined ? "-" : num(result.rank)),
    el("td", { className: "num" }, result.players === undefined || result.players === null ? "" : num(result.players)),
    el("td", { className: `status-${result.status}` }, result.status),
    el("td", { className: "num" }, num(result.cards)),
    el("td", { className: "num" }, num(result.moves)),
    el("td", { className: "num" }, clock(result.elapsed_ms))));
  const headers = [["Day", ""], ["Rank", "num"], ["Of", "num"], ["Status", ""], ["Cards home", "num"], ["Moves", "num"], ["Time", "num"]];
  main.replaceChildren(
    el("div", { className: "dayhead" }, el("h2", { id: "player-name" }, player.name, el("span", { className: "claimed", title: "a claimed name" }, " ✓")),
      player.created_ms ? el("span", { className: "muted" }, `claimed ${dateText(player.created_ms)}`) : null),
    el("ul", { className: "stats", id: "stats" },
      stat("days played", num(player.days_played), "days-played"),
      stat("days won", num(player.days_won), "days-won"),
      stat("streak (days in a row)", num(player.streak), "streak"),
      stat("best streak", num(player.best_streak), "best-streak"),
      stat("best time", player.best_ms === null || player.best_ms === undefined ? "-" : clock(player.best_ms), "best-time"),
      stat("rating", ratingText, "rating")),
    el("div", { className: "tablewrap" },
      el("table", { id: "history" },
        el("caption", {}, "Days played"),
        el("thead", {}, el("tr", {}, ...headers.map(([label, cls]) => el("th", { scope: "col", className: cls || null }, label)))),
        el("tbody", { id: "history-body" }, ...rows))),
    history.length ? null : el("p", { className: "muted", id: "history-empty" }, "No finished day yet (today's attempt shows here once the day is over)."),
    el("p", {}, el("a", { href: "/daily" }, "Today's board")));
}

// ------------------------------------------------------------------ today, live

let socket = null;
let attempt = 0;

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(encode(message));
}

function follow() {
  let ws;
  try {
    ws = new WebSocket(WS_URL);
  } catch (error) {
    setConn(`no live updates: ${error.message}`, "down");
    return;
  }
  socket = ws;
  ws.binaryType = "arraybuffer";
  ws.addEventListener("open", () => send({ type: "hello", v: PROTOCOL_VERSION, name: SPECTATOR_NAME }));
  ws.addEventListener("message", (event) => {
    if (!(event.data instanceof ArrayBuffer)) return;
    let message;
    try {
      message = decode(new Uint8Array(event.data), { useBigInt64: true });
    } catch {
      return;
    }
    if (message && typeof message === "object" && typeof message.type === "string") onMessage(message);
  });
  ws.addEventListener("close", () => {
    if (socket !== ws) return;
    socket = null;
    state.live = false;
    const delay = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** attempt) * (0.75 + Math.random() * 0.5);
    attempt += 1;
    setConn("live updates lost: reconnecting…", "down");
    setTimeout(follow, delay);
  });
}

function onMessage(msg) {
  switch (msg.type) {
    case "welcome":
      attempt = 0;
      state.offsetMs = num(msg.server_time) - Date.now();
      send({ type: "watch_daily" });
      break;
    case "daily_day": {
      const day = num(msg.day);
      if (state.today && day !== state.today.day) {
        load(); // the day rolled over: today's and yesterday's boards again
        return;
      }
      if (state.today) Object.assign(state.today, { endsAt: msg.ends_at, commitment: msg.commitment });
      break;
    }
    case "daily_board": {
      const day = num(msg.day);
      if (!state.today || day !== state.today.day) break;
      const board = dayOf(msg);
      Object.assign(state.today, { rows: board.rows, final: board.final });
      state.live = true;
      setConn("connected: the board follows live", "up");
      break;
    }
    case "error":
      setConn(`no live updates: ${msg.message}`, "down");
      return;
    default:
      return;
  }
  renderTodayBoard();
}

/** Only today's section again (a live change): yesterday's, checked once, stays as it is. */
function renderTodayBoard() {
  const shown = document.getElementById("today");
  if (!shown || state.problem) {
    renderToday();
    return;
  }
  shown.replaceWith(daySection("today", "Today's board", state.today, { live: state.live }));
  renderCountdown();
}

// ------------------------------------------------------------------ start

async function load() {
  try {
    if (PLAYER !== null) {
      state.player = await api(`/api/players/${encodeURIComponent(PLAYER)}`);
      setConn("", "idle");
      renderPlayer();
      return;
    }
    if (DAY_KEY !== null) {
      state.day = dayOf(await api(`/api/daily/${DAY_KEY}`));
      state.today = dayOf(await api("/api/daily"));
      setConn("", "idle");
      renderDay();
      return;
    }
    state.today = dayOf(await api("/api/daily"));
    state.standing = await api("/api/board");
    state.yesterday = null;
    if (state.today.day > 0) {
      try {
        state.yesterday = dayOf(await api(`/api/daily/${state.today.day - 1}`));
      } catch (error) {
        if (error.status !== 404) throw error;
      }
    }
    renderToday();
  } catch (error) {
    state.problem = error.status === 404 ? (PLAYER !== null ? `No claimed player ${PLAYER} on this server.` : "There is no such day on this server.") : `The server says: ${error.message}`;
    setConn("", "idle");
    if (PLAYER !== null) renderPlayer();
    else if (DAY_KEY !== null) renderDay();
    else renderToday();
  }
}

await load();
if (PLAYER === null && DAY_KEY === null) {
  setConn("connecting for live updates…", "connecting");
  follow();
  setInterval(renderCountdown, 250);
}
