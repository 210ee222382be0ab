// The Plot race, spectator page. Speaks the race protocol (docs/protocol.md) over the game
// server's WebSocket as a spectator, exactly like `plot watch`: hello, then join as a spectator
// (or list_rooms on the front page). Every string from the server goes into the page as text
// (textContent / text nodes), never as HTML.

import { decode, encode } from "./vendor/msgpack/index.mjs";
import { replayRecord } from "./replay.js";

const WS_URL = document.querySelector('meta[name="plot-ws-url"]').content;
const PROTOCOL_VERSION = 2;
const SPECTATOR_NAME = "web spectator";
const LIST_REFRESH_MS = 5000;
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8000;
const CLOSE_SUPERSEDED = 4001; // the server's close code when a newer connection resumed the same token
const CODE_PATTERN = /^[23456789ABCDEFGHJKMNPQRSTUVWXYZ]{5}$/;
const CHAT_MAX = 200; // characters in a chat line (docs/protocol.md, "Chat")
const FEED_KEPT = 100; // chat lines and finish events the page keeps on show
const PACE_AFTER_MS = 10000; // no pace before this much race time: it would say little
const NAME_KEY = "plot-chat-name"; // where the page keeps the name a person chats under

const watchPath = location.pathname.match(/^\/watch\/([A-Z0-9]{5})$/);
const CODE = watchPath ? watchPath[1] : null;
// A room's page names its room in the WebSocket's URL (?room=CODE, the rest of the URL kept): a
// balancer hashing on it puts every connection of a room on one node (docs/deployment.md, "Room affinity").
const SOCKET_URL = CODE ? withRoom(WS_URL, CODE) : WS_URL;

const RANKS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"];
const RANK_NAMES = ["Ace", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten", "Jack", "Queen", "King"];
const SUITS = ["♣", "♦", "♥", "♠"];
const SUIT_NAMES = ["clubs", "diamonds", "hearts", "spades"];

// ------------------------------------------------------------------ small helpers

/** ``url`` with its query's ``room`` parameter set to ``code``; its other parameters as they are. */
function withRoom(url, code) {
  const parsed = new URL(url);
  const query = parsed.search.slice(1).split("&").filter((part) => part && part.split("=")[0] !== "room");
  query.push(`room=${code}`);
  parsed.search = query.join("&");
  return parsed.href;
}

/** An element with text children only: strings become text nodes, never markup. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const num = (x) => (typeof x === "bigint" ? Number(x) : x); // uint64 times arrive as BigInt

function clock(ms) {
  if (ms === null || ms === undefined) return "-:--";
  let seconds = Math.floor(Math.max(ms, 0) / 1000);
  let minutes = Math.floor(seconds / 60);
  seconds %= 60;
  const ss = String(seconds).padStart(2, "0");
  if (minutes >= 60) {
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    return `${hours}:${String(minutes).padStart(2, "0")}:${ss}`;
  }
  return `${minutes}:${ss}`;
}

function cardNode(card) {
  const suit = Math.floor((card % 52) / 13);
  const rank = card % 13;
  const red = suit === 1 || suit === 2;
  return el("span", {
    className: red ? "card red" : "card",
    role: "img",
    "aria-label": `${RANK_NAMES[rank]} of ${SUIT_NAMES[suit]}`,
    title: `${RANK_NAMES[rank]} of ${SUIT_NAMES[suit]}`,
  }, RANKS[rank] + SUITS[suit]);
}

function ordinal(n) {
  const suffix = n % 100 >= 10 && n % 100 <= 20 ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] ?? "th");
  return `${n}${suffix}`;
}

/** Cards home per minute of race time (docs/protocol.md, "Pace"); "-" before PACE_AFTER_MS. */
function paceText(cards, elapsedMs) {
  return elapsedMs < PACE_AFTER_MS ? "-" : `${((cards * 60000) / elapsedMs).toFixed(1)}/min`;
}

/** "bob finished 3rd at 7:39"; a game that ended without winning keeps its place only for now. */
function finishText(done) {
  const at = clock(num(done.elapsed_ms));
  const place = ordinal(num(done.place));
  if (done.status === "won") return `${done.name} finished ${place} at ${at}`;
  const verb = done.status === "blocked" ? "is blocked" : done.status;
  const cards = num(done.cards);
  return `${done.name} ${verb} at ${at} with ${cards} card${cards === 1 ? "" : "s"} (${done.final ? place : `${place} for now`})`;
}

function storedName() {
  try {
    return localStorage.getItem(NAME_KEY) || SPECTATOR_NAME;
  } catch {
    return SPECTATOR_NAME; // storage refused (a private window): the default name
  }
}

function rulesText(rules, leakProof) {
  const parts = [
    `up to ${rules.max_racers} racers`,
    rules.undo ? "undo on" : "undo off",
    rules.time_limit ? `time limit ${clock(num(rules.time_limit) * 1000)}` : "no time limit",
    rules.bots_allowed ? "bots welcome" : "no bots",
  ];
  if (rules.winnable_only) parts.push("winnable deals only");
  if (leakProof) parts.push("boards after the race");
  else parts.push(rules.spectator_boards === undefined ? "live boards" : `live boards ${rules.spectator_boards} s behind`);
  if (rules.spectator_chat === "always") parts.push("racers read the spectators' chat");
  return parts.join(" · ");
}

// ------------------------------------------------------------------ state

const state = {
  token: null,
  offsetMs: 0, // server clock minus ours
  room: null,
  countdown: null,
  start: null,
  commitments: new Map(), // race -> the commitment announced at its start, as first seen
  leaderboard: null,
  boards: null,
  results: null,
  rooms: null,
  problem: null,
  name: storedName(), // the name this page says hello with (and chats under)
  playerId: null,
  chatRoom: null,
  chatSeqs: new Set(), // the chat lines on show, by seq (each once)
  finishes: new Set(), // "race:player" of the finish events on show
  feed: [], // chat lines and finish events, as they came: { line } or { finished }
  feedVersion: 0, // grows with every change of the feed (the chat log is redrawn only then)
  pendingChat: null, // a line to send once the page is back in the room under its new name
  chatProblem: "",
};

function serverNow() {
  return Date.now() + state.offsetMs;
}

function raceClockMs() {
  if (state.results && state.leaderboard) {
    return Math.max(0, ...state.leaderboard.racers.map((r) => num(r.elapsed_ms)));
  }
  if (state.start && state.room && state.room.phase === "racing") return Math.max(0, serverNow() - num(state.start.started_at));
  return null;
}

function forgetRace() {
  state.countdown = null;
  state.start = null;
  state.leaderboard = null;
  state.boards = null;
  state.results = null;
}

// ------------------------------------------------------------------ connection

const conn = document.getElementById("conn");
let socket = null;
let attempt = 0;
let retryAfterMs = null;
let retryTimer = null;
let retryTicker = null;
let listTimer = null;

function setConn(text, kind) {
  conn.textContent = text;
  conn.dataset.state = kind;
}

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(encode(message));
}

function hello() {
  const message = { type: "hello", v: PROTOCOL_VERSION, name: state.name };
  if (state.token) message.token = state.token;
  send(message);
}

function connect() {
  clearTimeout(retryTimer);
  clearInterval(retryTicker);
  setConn(attempt ? `reconnecting (attempt ${attempt})…` : "connecting…", attempt ? "down" : "connecting");
  let ws;
  try {
    ws = new WebSocket(SOCKET_URL);
  } catch (error) {
    setConn(`cannot open the connection: ${error.message}`, "down");
    scheduleReconnect();
    return;
  }
  socket = ws;
  ws.binaryType = "arraybuffer";
  ws.addEventListener("open", hello);
  ws.addEventListener("message", (event) => {
    if (!(event.data instanceof ArrayBuffer)) return;
    let message;
    try {
      message = decode(new Uint8Array(event.data), { useBigInt64: true });
    } catch {
      return; // not MessagePack: not from a plot-server; ignore it
    }
    if (message && typeof message === "object" && typeof message.type === "string") onMessage(message);
  });
  ws.addEventListener("close", (event) => {
    if (socket !== ws) return;
    socket = null;
    clearInterval(listTimer);
    if (event.code === CLOSE_SUPERSEDED) {
      // Another connection resumed this page's identity: trying again would only take it back.
      state.problem = { text: "This page was replaced by a newer connection: reload it to watch here again.", final: true };
      setConn("disconnected", "down");
      render();
      return;
    }
    scheduleReconnect();
  });
}

function scheduleReconnect() {
  if (state.problem && state.problem.final) return;
  // Back off: 0.5 s doubling to 8 s, with jitter so a restarted server is not hit all at once.
  const backoff = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** attempt) * (0.75 + Math.random() * 0.5);
  const delay = retryAfterMs !== null ? Math.max(retryAfterMs, RETRY_FIRST_MS) : backoff;
  retryAfterMs = null;
  attempt += 1;
  const at = Date.now() + delay;
  const tell = () => {
    const left = Math.max(0, Math.ceil((at - Date.now()) / 1000));
    setConn(`connection lost: reconnecting in ${left} s (attempt ${attempt})`, "down");
  };
  tell();
  retryTicker = setInterval(tell, 500);
  retryTimer = setTimeout(connect, delay);
}

function onMessage(msg) {
  switch (msg.type) {
    case "welcome":
      attempt = 0;
      state.token = msg.token;
      state.playerId = msg.player_id;
      state.offsetMs = num(msg.server_time) - Date.now();
      setConn(CODE ? "connected: watching live" : "connected", "up");
      if (CODE) {
        state.room = null; // a fresh snapshot follows; versions may restart after a server restart
        if (msg.room !== CODE) send({ type: "join", code: CODE, role: "spectator" });
      } else {
        send({ type: "list_rooms" });
        clearInterval(listTimer);
        listTimer = setInterval(() => send({ type: "list_rooms" }), LIST_REFRESH_MS);
      }
      break;
    case "error":
      onError(msg);
      break;
    case "room":
      if (msg.code !== CODE) break;
      if (state.room && state.room.race === msg.race && num(msg.version) < num(state.room.version)) break;
      if (state.room && state.room.race !== msg.race) forgetRace();
      if (msg.phase === "lobby") forgetRace();
      state.room = msg;
      state.problem = null;
      if (state.pendingChat !== null) {
        send({ type: "chat", text: state.pendingChat });
        state.pendingChat = null;
      }
      break;
    case "chat":
      if (msg.room !== CODE) break;
      addLines([msg.line]);
      break;
    case "chat_history":
      if (msg.room !== CODE) break;
      addLines(msg.lines);
      break;
    case "finished": {
      const key = `${msg.race}:${msg.player_id}`;
      if (state.finishes.has(key)) break;
      state.finishes.add(key);
      state.feed.push({ finished: msg });
      state.feedVersion += 1;
      break;
    }
    case "countdown":
      state.countdown = msg;
      break;
    case "race_start":
      state.start = msg;
      if (!state.commitments.has(msg.race)) state.commitments.set(msg.race, msg.commitment);
      break;
    case "leaderboard": {
      const held = state.leaderboard;
      if (state.results && state.results.race === msg.race) break; // the final rows win
      if (held && held.race === msg.race && num(msg.version) < num(held.version)) break;
      if (msg.partial) {
        // Only the rows whose cards, status, rank or connection changed: merged into the held ones.
        if (!held || held.race !== msg.race) break; // a whole one comes with the next snapshot
        const rows = new Map(held.racers.map((r) => [r.player_id, r]));
        for (const r of msg.racers) rows.set(r.player_id, r);
        // By rank, a ghost before the live racer of its rank (docs/ghosts.md).
        const racers = [...rows.values()].sort((a, b) => num(a.rank) - num(b.rank) || !!b.ghost - !!a.ghost);
        state.leaderboard = { race: msg.race, version: Math.max(num(msg.version), num(held.version)), racers };
        break;
      }
      state.leaderboard = msg;
      break;
    }
    case "boards":
      state.boards = msg;
      break;
    case "results":
      state.results = msg;
      state.leaderboard = { race: msg.race, version: Infinity, racers: msg.racers };
      break;
    case "kicked":
      state.problem = { text: msg.reason === "idle" ? "The room closed: nobody used it for a while." : "You were removed from the room.", final: true };
      break;
    case "shutdown":
      retryAfterMs = msg.retry_after_ms === null || msg.retry_after_ms === undefined ? null : num(msg.retry_after_ms);
      setConn("the server is restarting: reconnecting soon", "down");
      return;
    case "room_list":
      state.rooms = msg.rooms;
      break;
    default:
      return; // pong, left, and types a newer server may add
  }
  render();
}

function addLines(lines) {
  for (const line of lines) {
    const seq = num(line.seq);
    if (state.chatSeqs.has(seq)) continue;
    state.chatSeqs.add(seq);
    state.feed.push({ line });
    state.feedVersion += 1;
  }
  state.feed = state.feed.slice(-FEED_KEPT);
}

function onError(msg) {
  if (msg.ref === "chat" || msg.ref === "mute") {
    state.chatProblem = msg.code === "muted" ? "The host muted you in this room: your lines reach nobody." : msg.message;
    render();
    return;
  }
  if (msg.code === "name_invalid" && state.name !== SPECTATOR_NAME) {
    // The name the page's person chose is refused: say why, and watch on under the default name.
    state.chatProblem = `That name cannot be used: ${msg.message}.`;
    state.pendingChat = null;
    state.name = SPECTATOR_NAME;
    try {
      localStorage.removeItem(NAME_KEY);
    } catch {
      // storage refused: nothing was kept
    }
    document.getElementById("chat-name").value = state.name;
    hello();
    render();
    return;
  }
  if (msg.code === "bad_token") {
    state.token = null; // the server forgot us (a restart without Redis): a new identity
    hello();
    return;
  }
  if (msg.code === "rate_limited" && msg.ref === "join" && CODE) {
    // The server's answer budget for this page (or its address) is spent: join again once it allows.
    const wait = Number((/retry_ms=(\d+)/.exec(msg.message) || [])[1] || 1000);
    state.problem = { text: `The server is busy: joining again in ${Math.ceil(wait / 1000)} s.`, final: false };
    setTimeout(() => send({ type: "join", code: CODE, role: "spectator" }), wait);
    render();
    return;
  }
  if (msg.code === "unknown_room") {
    // Final: the page shows only that (a room is never made under a code asked for).
    state.problem = { text: `There is no room ${CODE} on this server: it may have closed, or the code is mistyped.`, final: true, notFound: true };
    if (socket) socket.close(1000); // nothing to follow: no reconnecting either (final)
  } else {
    state.problem = { text: `The server says: ${msg.message} (${msg.code})`, final: false };
  }
  render();
}

// ------------------------------------------------------------------ the front page: open rooms

function buildListPage(main) {
  document.title = "Open rooms · The Plot race";
  const tbody = el("tbody", { id: "rooms-body" });
  const table = el("table", { id: "rooms" },
    el("caption", {}, "Open rooms on this server"),
    el("thead", {}, el("tr", {},
      el("th", { scope: "col" }, "Room"),
      el("th", { scope: "col" }, "Host"),
      el("th", { scope: "col" }, "Phase"),
      el("th", { scope: "col", className: "num" }, "Racers"),
      el("th", { scope: "col", className: "num" }, "Spectators"),
      el("th", { scope: "col", className: "rules" }, "Rules"))),
    tbody);
  const input = el("input", { id: "code-input", name: "code", autocomplete: "off", spellcheck: "false", maxlength: "9", placeholder: "K7QXM" });
  const form = el("form", { className: "bycode" },
    el("label", { for: "code-input" }, "Watch a room by its code (private rooms too):"), input,
    el("button", { type: "submit" }, "Watch"));
  const formProblem = el("p", { id: "code-problem", className: "warn", "aria-live": "polite" });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const code = input.value.toUpperCase().replace(/[\s_-]/g, "");
    if (!CODE_PATTERN.test(code)) {
      formProblem.textContent = "A room code is 5 characters from 2-9 and A-Z (no 0, 1, I, L, O).";
      return;
    }
    location.assign(`/watch/${code}`);
  });
  main.replaceChildren(
    el("h2", {}, "Watch a race"),
    el("p", { id: "rooms-empty", className: "muted", hidden: true }, "No open rooms right now. Rooms hosted with plot host appear here (private ones do not)."),
    el("div", { className: "tablewrap" }, table),
    form, formProblem);
}

function renderList() {
  const tbody = document.getElementById("rooms-body");
  const rooms = state.rooms || [];
  document.getElementById("rooms-empty").hidden = state.rooms === null || rooms.length > 0;
  tbody.replaceChildren(...rooms.map((room) => {
    const warnings = [];
    if (room.chosen_deal) warnings.push("chosen deal");
    if (!room.leak_proof) warnings.push("not leak-proof");
    return el("tr", { "data-code": room.code },
      el("td", {}, el("a", { href: `/watch/${encodeURIComponent(room.code)}`, className: "code" }, room.code)),
      el("td", { className: "name" }, room.host_name),
      el("td", {}, room.phase),
      el("td", { className: "num", "data-label": "racers" }, `${room.racers}/${room.max_racers}`),
      el("td", { className: "num", "data-label": "watching" }, room.spectators),
      el("td", { className: "rules" }, rulesText(room, room.leak_proof),
        warnings.length ? el("span", { className: "warn" }, ` · ${warnings.join(" · ")}`) : null));
  }));
}

// ------------------------------------------------------------------ the watch page

function buildWatchPage(main) {
  document.title = `Room ${CODE} · The Plot race`;
  const headers = [["Rank", "num"], ["Racer", ""], ["Cards home (of 104)", ""], ["Moves", "num"], ["Status", ""], ["Last move", "num col-elapsed"], ["Pace", "num col-pace"]];
  const chatInput = el("input", { id: "chat-input", name: "text", autocomplete: "off", maxlength: String(CHAT_MAX), placeholder: "Say something to the room" });
  const nameInput = el("input", { id: "chat-name", name: "name", autocomplete: "nickname", maxlength: "24", value: state.name });
  const chatForm = el("form", { id: "chat-form", className: "chatform" },
    el("label", { for: "chat-name" }, "Name"), nameInput,
    el("label", { for: "chat-input", className: "visually-hidden" }, "Chat line"), chatInput,
    el("button", { type: "submit" }, "Send"));
  chatForm.addEventListener("submit", (event) => {
    event.preventDefault();
    sendChat(nameInput.value.trim(), chatInput.value.trim());
    chatInput.value = "";
  });
  main.replaceChildren(
    el("div", { className: "roomhead" },
      el("h2", {}, "Room ", el("span", { className: "code" }, CODE)),
      el("span", { id: "phase", className: "phase" }, "joining"),
      el("span", { id: "clock", className: "clock", "aria-label": "race time" }),
      el("span", { id: "spectators", className: "muted" })),
    el("p", { id: "rules", className: "rules" }),
    el("p", { id: "warnings", className: "warn" }),
    el("p", { id: "problem", className: "notice bad", hidden: true, role: "alert" }),
    el("p", { id: "note", className: "notice", "aria-live": "polite" }),
    el("p", { id: "invite", className: "invite", hidden: true }, "Join this race: ",
      el("code", { id: "invite-command" }, `plot join ${inviteUrl()}`)),
    el("ul", { id: "lobby", className: "lobby" }),
    el("section", { id: "podium-section", hidden: true, "aria-labelledby": "podium-title" },
      el("h2", { id: "podium-title", className: "visually-hidden" }, "Podium"),
      el("ol", { id: "podium", className: "podium" })),
    el("div", { className: "tablewrap" },
      el("table", { id: "leaderboard", hidden: true },
        el("caption", {}, "Leaderboard"),
        el("thead", {}, el("tr", {}, ...headers.map(([label, cls]) => el("th", { scope: "col", className: cls || null }, label)))),
        el("tbody", { id: "leaderboard-body" }))),
    el("section", { id: "chat-section", "aria-labelledby": "chat-title" },
      el("h2", { id: "chat-title" }, "Chat"),
      el("ol", { id: "chat-log", className: "chatlog", "aria-live": "polite" }),
      chatForm,
      el("p", { id: "chat-problem", className: "warn", "aria-live": "polite" }),
      el("p", { id: "chat-note", className: "muted" })),
    el("section", { id: "verify", hidden: true, "aria-labelledby": "verify-title" }),
    el("section", { id: "boards-section", hidden: true, "aria-labelledby": "boards-title" },
      el("h2", { id: "boards-title" }, "Boards"),
      el("p", { id: "boards-note", className: "muted" }),
      el("div", { id: "boards", className: "boards" })));
}

const rowsById = new Map();

function leaderboardRow(playerId) {
  let row = rowsById.get(playerId);
  if (!row) {
    row = el("tr", { "data-player": playerId },
      el("td", { className: "num rank" }),
      el("td", { className: "name" }),
      el("td", { className: "cardscell" }, el("div", { className: "barline" },
        el("span", { className: "count" }),
        el("div", { className: "bar", "aria-hidden": "true" }, el("div", { className: "bar-fill" })))),
      el("td", { className: "num moves" }),
      el("td", { className: "status" }),
      el("td", { className: "num elapsed col-elapsed" }),
      el("td", { className: "num pace col-pace" }));
    rowsById.set(playerId, row);
  }
  return row;
}

function renderLeaderboard() {
  const table = document.getElementById("leaderboard");
  const body = document.getElementById("leaderboard-body");
  const board = state.leaderboard;
  table.hidden = !board;
  if (!board) {
    body.replaceChildren();
    rowsById.clear();
    return;
  }
  const rows = board.racers.map((racer) => {
    const row = leaderboardRow(racer.player_id);
    const [rankCell, nameCell, cardsCell, movesCell, statusCell, elapsedCell, paceCell] = row.cells;
    rankCell.textContent = String(racer.rank);
    nameCell.replaceChildren(document.createTextNode(racer.name));
    if (racer.claimed) nameCell.append(claimedMark());
    if (racer.bot) nameCell.append(el("span", { className: "tag" }, "bot"));
    if (racer.ghost) nameCell.append(el("span", { className: "tag" }, "ghost"));
    if (!racer.connected) nameCell.append(el("span", { className: "tag away" }, "away"));
    const change = state.results && state.results.ratings ? state.results.ratings[racer.player_id] : undefined;
    if (change) nameCell.append(ratingTag(change));
    const cards = num(racer.cards);
    cardsCell.querySelector(".bar-fill").style.width = `${(100 * cards) / 104}%`; // CSSOM: allowed by the CSP
    cardsCell.querySelector(".count").textContent = String(cards);
    cardsCell.dataset.cards = String(cards);
    movesCell.textContent = String(racer.moves);
    statusCell.textContent = racer.status;
    statusCell.className = `status status-${racer.status}`;
    elapsedCell.textContent = clock(num(racer.elapsed_ms));
    paceCell.textContent = paceText(cards, num(racer.elapsed_ms));
    return row;
  });
  body.replaceChildren(...rows);
}

function sendChat(name, text) {
  if (!name) {
    state.chatProblem = "A name, please: the room shows your lines under it.";
    render();
    return;
  }
  if (!text) return;
  state.chatProblem = "";
  if (name === state.name) {
    send({ type: "chat", text });
    render();
    return;
  }
  // A new name is a new hello: the page leaves the room, says hello as that name and joins again,
  // then sends the line.
  state.name = name;
  try {
    localStorage.setItem(NAME_KEY, name);
  } catch {
    // storage refused: the name lasts as long as the page
  }
  state.pendingChat = text;
  state.token = null;
  send({ type: "leave" });
  const old = socket;
  socket = null;
  if (old) old.close();
  connect();
}

let feedShown = -1; // the feed version the chat log shows

function renderChat() {
  const log = document.getElementById("chat-log");
  if (feedShown !== state.feedVersion) {
    feedShown = state.feedVersion;
    log.replaceChildren(...state.feed.map(feedItem));
    log.scrollTop = log.scrollHeight;
  }
  document.getElementById("chat-problem").textContent = state.chatProblem;
  const room = state.room;
  const note = document.getElementById("chat-note");
  if (!room) note.textContent = "";
  else if (room.rules.spectator_chat === "always") note.textContent = "Racers read this chat during the race too.";
  else note.textContent = "While a race is on, only spectators read the spectators' lines; the racers read them before and after.";
}

// Beside a claimed name (docs/players.md): the player who claimed it on this server, not a look-alike.
function claimedMark() {
  return el("span", { className: "claimed", title: "a claimed name" }, " ✓");
}

// A rated race's change for one racer (docs/players.md): its shown rating after, and the change.
function ratingTag(change) {
  const delta = num(change.change);
  return el("span", { className: "tag rating", title: "rating after this race" },
    `${num(change.after.shown)} (${delta > 0 ? "+" : ""}${delta})`);
}

function feedItem(item) {
  if (item.finished) return el("li", { className: "finish" }, "» ", finishText(item.finished));
  const line = item.line;
  return el("li", { className: line.player_id === state.playerId ? "chat mine" : "chat", "data-seq": String(line.seq) },
    el("strong", {}, line.name),
    line.claimed ? claimedMark() : null,
    line.role === "spectator" ? el("span", { className: "muted" }, " (watching)") : null,
    ": ", line.text,
    line.audience === "spectators" ? el("span", { className: "muted" }, " (spectators only)") : null);
}

function renderPodium() {
  const section = document.getElementById("podium-section");
  const podium = document.getElementById("podium");
  const results = state.results;
  if (!results) {
    section.hidden = true;
    podium.replaceChildren();
    return;
  }
  const top = results.racers.slice(0, 3);
  const order = [1, 0, 2].filter((i) => i < top.length);
  podium.replaceChildren(...order.map((i) => {
    const row = top[i];
    const cards = num(row.cards);
    const pace = paceText(cards, num(row.elapsed_ms));
    const figure = (row.status === "won" ? clock(num(row.elapsed_ms)) : `${cards} card${cards === 1 ? "" : "s"}`) + (pace === "-" ? "" : ` · ${pace}`);
    return el("li", { className: `step place-${i + 1}`, "data-player": row.player_id, value: String(i + 1) },
      el("span", { className: "who" }, row.name, row.claimed ? claimedMark() : null),
      el("span", { className: "figure" }, figure),
      el("span", { className: "place" }, ordinal(i + 1)));
  }));
  section.hidden = false;
}

function renderLobby() {
  const lobby = document.getElementById("lobby");
  const room = state.room;
  if (!room || room.phase !== "lobby") {
    lobby.replaceChildren();
    return;
  }
  const racers = room.members.filter((m) => m.role === "racer");
  lobby.replaceChildren(...racers.map((m) => el("li", {},
    el("strong", {}, m.name),
    m.claimed ? claimedMark() : null,
    m.player_id === room.host ? el("span", { className: "tag" }, "host") : null,
    m.bot ? el("span", { className: "tag" }, "bot") : null,
    el("span", { className: "tag" }, m.ready ? "ready" : "not ready"))));
}

function phaseNote() {
  const room = state.room;
  if (!room) return "Joining the room…";
  switch (room.phase) {
    case "lobby": {
      const racers = room.members.filter((m) => m.role === "racer").length;
      return `In the lobby: ${racers} racer${racers === 1 ? "" : "s"} so far. The race starts when the host starts it.`;
    }
    case "dealing":
      return "The server is finding a deal it can prove winnable…";
    case "countdown":
      return "Get ready: the race is about to start.";
    case "racing":
      return room.leak_proof
        ? "Leak-proof room: nobody sees a board until the race is over. The leaderboard shows cards home, never which cards."
        : `This room shows live boards ${room.rules.spectator_boards} s behind the race.`;
    case "results":
      return "The race is over.";
    default:
      return "";
  }
}

function boardNode(playerId, name, view, sub) {
  const pile = (pileName, label, cards, shown) => el("div", { className: "pile", "data-pile": pileName, "data-cards": cards.join(",") },
    el("span", { className: "label" }, label),
    shown.length ? el("span", { className: "cards" }, ...shown.map(cardNode)) : el("span", { className: "empty" }, "empty"));
  const waste = view.waste;
  const reserveTop = view.reserve_top === null || view.reserve_top === undefined ? [] : [view.reserve_top];
  return el("article", { className: "board", "data-player": playerId, "aria-label": `${name}: board` },
    el("h3", {}, name, el("span", { className: "sub" }, sub ? ` · ${sub}` : "")),
    el("div", { className: "row top3" },
      el("div", { className: "pile", "data-pile": "stock", "data-count": view.stock }, el("span", { className: "label" }, "stock"), `${view.stock} cards`),
      pile("waste", `waste (${waste.length})`, waste, waste.slice(-6)),
      pile("reserve", `reserve (${view.reserve_count})`, reserveTop, reserveTop)),
    el("div", { className: "row found" }, ...view.foundations.map((cards, i) => pile(`f${i}`, `f${i} (${cards.length})`, cards, cards.slice(-1)))),
    el("div", { className: "row tab" }, ...view.tableau.map((cards, i) => pile(`t${i}`, `t${i}`, cards, cards))));
}

function racerOrder() {
  const ids = state.leaderboard ? state.leaderboard.racers.map((r) => r.player_id) : [];
  const names = new Map((state.leaderboard ? state.leaderboard.racers : []).map((r) => [r.player_id, r]));
  return { ids, names };
}

let boardsShown = null; // the message the boards on screen were drawn from

function renderBoards() {
  const section = document.getElementById("boards-section");
  const container = document.getElementById("boards");
  const note = document.getElementById("boards-note");
  const room = state.room;
  let source = null;
  if (state.results) source = state.results;
  else if (room && room.phase === "racing" && state.boards && (raceClockMs() ?? 0) >= num(state.boards.delay_ms)) source = state.boards;
  if (!source) {
    section.hidden = true;
    if (boardsShown !== null) container.replaceChildren();
    boardsShown = null;
    return;
  }
  section.hidden = false;
  if (boardsShown === source) return;
  boardsShown = source;
  const { ids, names } = racerOrder();
  if (source === state.results) {
    const results = state.results;
    note.textContent = "Final boards, replayed in this browser from the revealed records.";
    const order = [...results.ranking, ...Object.keys(results.records).filter((id) => !results.ranking.includes(id))];
    container.replaceChildren(...order.filter((id) => results.records[id]).map((id) => {
      const record = results.records[id];
      const row = names.get(id);
      const name = row ? row.name : id;
      try {
        const { view, cardsHome } = replayRecord(record.deal, record.moves);
        const agrees = !row || num(row.cards) === cardsHome;
        const sub = `${cardsHome} card${cardsHome === 1 ? "" : "s"} home${row ? `, ${row.status}` : ""}${agrees ? "" : " (does NOT agree with the leaderboard)"}`;
        return boardNode(id, name, view, sub);
      } catch (error) {
        return el("article", { className: "board", "data-player": id }, el("h3", {}, name), el("p", {}, `This record does not replay: ${error.message}`));
      }
    }));
  } else {
    const boards = state.boards;
    note.textContent = `Live boards, ${Math.round(num(boards.delay_ms) / 1000)} s behind the race (as of race time ${clock(num(boards.as_of_ms))}).`;
    const order = [...ids.filter((id) => boards.boards[id]), ...Object.keys(boards.boards).filter((id) => !ids.includes(id))];
    container.replaceChildren(...order.map((id) => boardNode(id, names.get(id)?.name ?? id, boards.boards[id], `${boards.boards[id].status}`)));
  }
}

// ---- the commitment check (Web Crypto SHA-256) and the plot verify commands

let verifiedFor = null;
let recordUrls = []; // the records' download links (blob URLs), freed when the results they belong to go

async function sha256Hex(text) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function safeFilePart(name) {
  return name.replace(/[^A-Za-z0-9_-]+/g, "_").replace(/^_+|_+$/g, "").slice(0, 24) || "racer";
}

function shellWord(text) {
  // The server's strings go into a line people paste into a shell: quoted (POSIX) unless plainly safe.
  return /^[A-Za-z0-9._\/:=+-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`;
}

function recordJson(record) {
  // The deal is a 64-bit number: written from its decimal text so no digit is lost.
  return `{"deal": ${String(record.deal)}, "moves": ${JSON.stringify(record.moves)}, "undo": ${record.undo ? "true" : "false"}}\n`;
}

async function renderVerify() {
  const section = document.getElementById("verify");
  const results = state.results;
  if (!results) {
    if (verifiedFor !== null) {
      section.hidden = true;
      section.replaceChildren();
      recordUrls.forEach((url) => URL.revokeObjectURL(url));
      recordUrls = [];
      verifiedFor = null;
    }
    return;
  }
  if (verifiedFor === results) return;
  verifiedFor = results;
  recordUrls.forEach((url) => URL.revokeObjectURL(url));
  recordUrls = [];
  const deal = String(results.deal);
  const announced = state.commitments.get(results.race);
  const expected = (announced ?? results.commitment).toLowerCase();
  const verdict = el("p", { className: "verdict", id: "verdict" }, "Checking the commitment…");
  const names = new Map(results.racers.map((r) => [r.player_id, r.name]));
  const list = el("ul", { className: "records" });
  results.ranking.forEach((id, index) => {
    const record = results.records[id];
    if (!record) return;
    const name = names.get(id) ?? id;
    const file = `${CODE}-race${results.race}-${String(index + 1).padStart(2, "0")}-${safeFilePart(name)}.json`;
    const href = URL.createObjectURL(new Blob([recordJson(record)], { type: "application/json" }));
    recordUrls.push(href);
    list.append(el("li", { "data-player": id },
      el("a", { href, download: file }, `${name}: download the record`),
      ` (${record.moves.length} ${record.moves.length === 1 ? "entry" : "entries"})`,
      // The commitment announced at the start (when this page saw it): checking the revealed one
      // would only show the server agrees with itself.
      el("pre", { className: "cmd" }, `plot verify ${file} --commitment=${shellWord(expected)} --salt=${shellWord(results.salt)}`)));
  });
  section.replaceChildren(
    el("h2", { id: "verify-title" }, "Fair play: the deal was fixed before the start"),
    el("p", {}, "Deal ", el("code", { id: "deal" }, deal), " · salt ", el("code", { id: "salt" }, results.salt)),
    el("p", {}, announced ? "Commitment announced at the start: " : "Commitment (this page did not see the start; it is checked against the one in the results): ",
      el("code", { id: "commitment" }, expected)),
    verdict,
    el("p", {}, "Check any racer's game yourself: download the record, then run the command beside it with the plot client, in the folder the record was saved to. It replays every entry and checks the deal against the commitment above."),
    list);
  section.hidden = false;
  if (!(globalThis.crypto && crypto.subtle)) {
    verdict.dataset.ok = "unknown";
    verdict.textContent = "This browser offers SHA-256 only on https:// or localhost pages, so it cannot check the commitment here: run the plot verify command below.";
    return;
  }
  const actual = await sha256Hex(`the-plot:${deal}:${results.salt}`);
  if (verifiedFor !== results) return;
  const ok = actual === expected;
  verdict.dataset.ok = String(ok);
  verdict.textContent = ok
    ? "✓ Verified in this browser: SHA-256 of “the-plot:<deal>:<salt>” equals the commitment announced before the race."
    : `✗ NOT verified: SHA-256 of “the-plot:<deal>:<salt>” is ${actual}, not the commitment.`;
}

/** The invite `plot join` takes: the game server's address with the room's code as its last
 * path segment (the same as `plot host` prints). */
function inviteUrl() {
  const parsed = new URL(WS_URL);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname.replace(/\/+$/, "")}/${CODE}`;
}

/** The one state of a page whose room does not exist: what happened, and the way back. */
function renderNotFound() {
  document.title = `No room ${CODE} · The Plot race`;
  setConn("not watching", "idle");
  main.replaceChildren(
    el("h2", { id: "not-found" }, "No room ", el("span", { className: "code" }, CODE)),
    el("p", { id: "problem", className: "notice bad", role: "alert" }, state.problem.text),
    el("p", {}, el("a", { href: "/", id: "back" }, "See the open rooms")));
}

function renderWatch() {
  if (state.problem && state.problem.notFound) {
    renderNotFound();
    return;
  }
  const room = state.room;
  const problem = document.getElementById("problem");
  problem.hidden = !state.problem;
  problem.textContent = state.problem ? state.problem.text : "";
  document.getElementById("phase").textContent = room ? room.phase : "joining";
  document.getElementById("spectators").textContent = room ? `${room.spectators} watching` : "";
  document.getElementById("rules").textContent = room ? rulesText(room.rules, room.leak_proof) : "";
  const warnings = [];
  if (room && room.chosen_deal) warnings.push("⚠ chosen deal: the host (and anyone who knows it) knows the stock.");
  if (room && !room.leak_proof) warnings.push("⚠ not leak-proof: spectators see live boards.");
  document.getElementById("warnings").textContent = warnings.join(" ");
  document.getElementById("note").textContent = phaseNote();
  const racers = room ? room.members.filter((m) => m.role === "racer").length : 0;
  document.getElementById("invite").hidden = !(room && room.phase === "lobby" && racers < room.rules.max_racers);
  if (room) document.title = `Room ${CODE} · ${room.phase} · The Plot race`;
  renderLobby();
  renderPodium();
  renderLeaderboard();
  renderChat();
  renderBoards();
  renderClock();
  renderVerify();
}

function renderClock() {
  const node = document.getElementById("clock");
  if (!node) return;
  const room = state.room;
  if (room && room.phase === "countdown" && state.countdown) {
    node.textContent = `starts in ${Math.max(0, Math.ceil((num(state.countdown.starts_at) - serverNow()) / 1000))}`;
  } else {
    const ms = raceClockMs();
    node.textContent = ms === null ? "" : clock(ms);
  }
  if (room && room.phase === "racing" && state.boards && !state.results && document.getElementById("boards-section").hidden) {
    renderBoards(); // the spectator delay ran out since the boards arrived
  }
}

function render() {
  if (CODE) renderWatch();
  else renderList();
}

// ------------------------------------------------------------------ start

const main = document.getElementById("main");
if (CODE) {
  buildWatchPage(main);
  setInterval(renderClock, 250);
} else {
  buildListPage(main);
}
render();
connect();
