"""Load generator for plot-server, and the same load against the bare echo baseline.

Runs in its own process. ``server`` mode opens N racer connections in rooms of
``--room-size`` (the first of each room hosts), plus M spectators, races real games
(each racer plays legal moves computed from its own view, at ``--pace`` moves per
second, or as fast as acknowledgements come back with ``--pace 0``; finished rooms
rematch so the load never stops), and reports accepted moves/s, acknowledgement
latency and the leaderboard fan-out latency to spectators. ``echo`` mode sends frames of
the same size at the same pace to ``bench/echo_server.py`` and reports the same figures.
``sizes`` prints the typical move and move_ok frame sizes (the echo server pads its
replies to the latter).

Frames are counted per audience in the measured window: what the racers receive per accepted
move (their own ``move_ok`` included), and what a spectator receives per move accepted in the
room it watches. The fan-out latency is timed by the ``cards`` figure: from a move that sends a
card home to the first leaderboard at a spectator showing that many cards (partial leaderboards
refresh ``moves`` only with the whole one, docs/protocol.md).

Prints one JSON object on stdout. On stderr, the lines ``window-start`` and ``window-end``
mark the measured window (``bench/run_load.py`` samples the server's CPU there). Only
loopback addresses are accepted.

    python bench/loadgen.py server --url ws://127.0.0.1:8765 --racers 100 --spectators 10 --duration 20
    python bench/loadgen.py echo --url ws://127.0.0.1:8799 --racers 100 --duration 20
    python bench/loadgen.py idle --url ws://127.0.0.1:8765 --racers 10000 --duration 5
    python bench/loadgen.py sizes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import re
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.client import ClientConnection, connect

from client.viewmodel import legal_moves
from shared import protocol as p
from shared.engine import Game, View

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
CLOSE_TIMEOUT = 2.0  # a run's end closes every connection at once; none may hold it up for long


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> dict[str, float | int | None]:
    def ms(x: float | None) -> float | None:
        return None if x is None else round(x * 1000, 3)

    return {
        "count": len(values),
        "p50": ms(percentile(values, 50)),
        "p99": ms(percentile(values, 99)),
        "p99.9": ms(percentile(values, 99.9)),
        "max": ms(max(values) if values else None),
    }


def mark(event: str) -> None:
    """Tell the runner (reading stderr) where the measured window starts and ends."""
    print(event, file=sys.stderr, flush=True)


@dataclass
class Stats:
    measuring: bool = False
    acks: int = 0
    rejected: int = 0
    errors: int = 0
    error_codes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ack_latency: list[float] = field(default_factory=list)
    # Every answer to a move (move_ok or move_rejected), for the overload figures: how long the
    # server took to say yes or no, and the sends the schedule asked for but a racer still waiting
    # for its previous answer could not make (at most one move outstanding per racer).
    answer_latency: list[float] = field(default_factory=list)
    sent: int = 0
    skipped: int = 0  # slots that passed while the racer waited for an answer
    late: int = 0  # slots that passed while the generator was behind (its own CPU, not the server)
    deferred: int = 0  # slots that passed while the racer honoured a busy answer's retry_ms
    busy_without_hint: int = 0  # busy answers that carried no retry_ms (the protocol says they must)
    window_rejections: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ack_bytes: int = 0  # move_ok frames received in the window, to compare with the echo's reply size
    move_bytes: int = 0
    undos: int = 0  # accepted undos in the window (home-undo: about half the accepted moves)
    races: int = 0  # races that reached their results (any time in the run)
    race_moves: int = 0
    # (player_id, race, cards) -> (sent, acked) of the move that brought that many cards home:
    # to time its arrival on spectators' leaderboards (rows are sent when cards change).
    card_times: dict[tuple[str, int, int], tuple[float, float]] = field(default_factory=dict)
    room_acks: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # accepted in the window, per room
    fanout_from_send: list[float] = field(default_factory=list)
    fanout_from_ack: list[float] = field(default_factory=list)
    # From the ack to the first spectator that sees the move: the coalescing wait (plus one delivery).
    fanout_first_from_ack: list[float] = field(default_factory=list)
    # (room, race, version) -> first arrival at any spectator: splits coalescing from delivery.
    first_arrival: dict[tuple[str, int, int], float] = field(default_factory=dict)
    delivery_spread: list[float] = field(default_factory=list)
    leaderboards: int = 0
    racer_frames: int = 0  # every frame the racers received in the window (acks, leaderboards, rooms...)
    racer_bytes: int = 0
    spectator_frames: int = 0  # every frame the spectators received in the window
    spectator_bytes: int = 0
    spectator_leaderboards: int = 0  # of those, leaderboards
    failures: list[str] = field(default_factory=list)


def choose_move(view: View, rng: random.Random) -> str | None:
    """A plausible racer: foundation moves first, then building, then turning the stock."""
    moves = legal_moves(view)
    if not moves:
        return None
    to_foundation = [m for m in moves if ">f" in m]
    if to_foundation:
        return to_foundation[0]
    building = [m for m in moves if m != "stock>waste" and not m.startswith("t")]
    if building and rng.random() < 0.7:
        return rng.choice(building)
    if "stock>waste" in moves:
        return "stock>waste"
    return rng.choice(moves)


def typical_sizes(games: int = 8, seed: int = 1) -> dict[str, float]:
    """Mean bytes of a racer's move frame and of the server's move_ok, over local games played
    by :func:`choose_move` (what the load generator sends and gets back)."""
    rng = random.Random(seed)
    move_sizes: list[int] = []
    ok_sizes: list[int] = []
    for g in range(games):
        game = Game(rng.getrandbits(64))
        view = game.view()
        move_id = 0
        while view.status == "playing":
            move = choose_move(view, rng) or "resign"
            move_id += 1
            touched = game.touched(move)
            lengths = tuple(game.pile_length(i) for i in touched)
            game.play(move)
            view = game.view()
            move_sizes.append(len(p.encode(p.Move(id=move_id, move=move))))
            changes, stock, reserve = game.changes(touched, lengths)
            status = None if game.status == "playing" else game.status
            ok = p.MoveOk(
                id=move_id,
                seq=move_id,
                t_ms=500 * move_id + g,
                check=game.check,
                changes=changes,
                stock=stock,
                reserve=reserve,
                status=status,
            )
            ok_sizes.append(len(p.encode(ok)))
    return {
        "move_bytes": round(sum(move_sizes) / len(move_sizes), 1),
        "move_ok_bytes": round(sum(ok_sizes) / len(ok_sizes), 1),
        "moves_per_game": round(len(move_sizes) / games, 1),
    }


class Racer:
    def __init__(self, index: int, args: argparse.Namespace, stats: Stats, rng: random.Random) -> None:
        self.index = index
        self.args = args
        self.stats = stats
        self.rng = rng
        self.ws: ClientConnection | None = None
        self.player_id = ""
        self.room_code = ""
        self.view: View | None = None
        self.move_id = 0
        self.race = 0
        self.undo_next = False  # home-undo: the last accepted move sent a card home; undo it next
        self.spectator = False  # its frames count as a spectator's

    async def send(self, message: p.ClientMessage) -> None:
        assert self.ws is not None
        await self.ws.send(p.encode(message))

    async def recv_frame(self) -> bytes:
        assert self.ws is not None
        frame = await self.ws.recv()
        assert isinstance(frame, bytes)
        if self.stats.measuring:
            if self.spectator:
                self.stats.spectator_frames += 1
                self.stats.spectator_bytes += len(frame)
            else:
                self.stats.racer_frames += 1
                self.stats.racer_bytes += len(frame)
        return frame

    async def recv(self) -> p.ServerMessage:
        return p.decode_server(await self.recv_frame())

    async def hello(self, name: str) -> None:
        self.ws = await connect(
            self.args.url, compression=None, max_size=2**22, open_timeout=60, close_timeout=CLOSE_TIMEOUT
        )
        await self.send(p.Hello(v=p.PROTOCOL_VERSION, name=name, bot=True))
        while True:
            msg = await self.recv()
            if isinstance(msg, p.Welcome):
                self.player_id = msg.player_id
                return
            if isinstance(msg, p.Error):
                raise RuntimeError(f"hello refused: {msg.code}: {msg.message}")


async def wait_for(racer: Racer, kind: type[Any]) -> Any:
    while True:
        msg = await racer.recv()
        if isinstance(msg, kind):
            return msg
        if isinstance(msg, p.Error):
            raise RuntimeError(f"{msg.code}: {msg.message}")


async def close_all(clients: list[Racer]) -> None:
    async def close(ws: ClientConnection) -> None:
        with contextlib.suppress(Exception):
            await ws.close()

    await asyncio.gather(*(close(c.ws) for c in clients if c.ws is not None))


async def run_room(
    room_index: int,
    racers: list[Racer],
    spectators: list[Racer],
    args: argparse.Namespace,
    stats: Stats,
    deadline_box: list[float],
    ready_barrier: asyncio.Event,
    setup_slots: asyncio.Semaphore,
) -> None:
    async with setup_slots:  # a few rooms at a time: handshakes are not what is measured
        await set_up_room(room_index, racers, spectators, args)
    host = racers[0]
    code = host.room_code
    await ready_barrier.wait()
    deadline = deadline_box[0]
    tasks = [asyncio.create_task(spectate(s, code, stats)) for s in spectators]
    try:
        while time.perf_counter() < deadline:
            await race_once(host, racers, args, stats, deadline)
    finally:
        for t in tasks:
            t.cancel()


async def set_up_room(room_index: int, racers: list[Racer], spectators: list[Racer], args: argparse.Namespace) -> None:
    host = racers[0]
    for r in racers:
        await r.hello(f"load-{room_index}-{r.index}")
    # --deal: room i deals N + i in every race, so that runs against different servers play the
    # same games (each racer's moves depend only on its board and its seeded choices).
    deal = None if args.deal is None else args.deal + room_index
    await host.send(p.CreateRoom(options=p.RoomOptions(max_racers=len(racers), private=True, deal=deal)))
    room = await wait_for(host, p.Room)
    code = room.code
    for r in racers[1:]:
        await r.send(p.Join(code=code, role=p.RACER))
        await wait_for(r, p.Room)
    # Spectators join a few at a time (each join is a room change every member hears about).
    slots = asyncio.Semaphore(args.spectator_concurrency)

    async def watch(s: Racer) -> None:
        async with slots:
            await s.hello(f"watch-{room_index}-{s.index}")
            await s.send(p.Join(code=code, role=p.SPECTATOR))
            await wait_for(s, p.Room)

    await asyncio.gather(*(watch(s) for s in spectators))
    for r in racers:
        r.room_code = code


def home_move(view: View) -> str | None:
    """A move that sends a card home and can be undone: from the waste or a tableau pile to a
    foundation (a reserve move uncovers the next reserve card, so it can never be undone)."""
    for move in legal_moves(view):
        if ">f" in move and not move.startswith("reserve"):
            return move
    return None


def home_move_played(move: str) -> str | None:
    """``move`` if it sent a card home undoably (the home-undo workload undoes it next), else None:
    the plausible racer's fallback may send the reserve's top home, which no undo takes back."""
    return move if ">f" in move and not move.startswith("reserve") else None


def next_move(racer: Racer) -> str:
    """The racer's next move under ``--workload``. ``play``: a plausible racer (``choose_move``).
    ``home-undo``: a card sent home is taken back by the next move (``undo``), so every move
    changes the racer's leaderboard row; where no card can go home undoably, a plausible move
    (which may turn the stock or play the reserve) until one can."""
    assert racer.view is not None
    if racer.args.workload == "home-undo":
        if racer.undo_next:
            return "undo"
        home = home_move(racer.view)
        if home is not None:
            return home
    return choose_move(racer.view, racer.rng) or "resign"


async def race_once(host: Racer, racers: list[Racer], args: argparse.Namespace, stats: Stats, deadline: float) -> None:
    for r in racers:
        await r.send(p.Ready(ready=True))
    # The host starts once the server's room snapshot shows everyone ready.
    while True:
        room = await wait_for(host, p.Room)
        racing = [m for m in room.members if m.role == p.RACER]
        if len(racing) == len(racers) and all(m.ready for m in racing):
            break
    await host.send(p.Start())
    await asyncio.gather(*(play(r, args, stats, deadline) for r in racers))
    stats.races += 1
    if time.perf_counter() < deadline:
        await host.send(p.Rematch())


RETRY_MS = re.compile(rb"retry_ms=(\d+)")


async def play(racer: Racer, args: argparse.Namespace, stats: Stats, deadline: float) -> None:
    """Play one race. Paced (``--pace``), a racer's sends fall on a fixed grid of slots; a slot
    that passes while the racer still waits for its previous answer is counted as skipped (the
    offered move that could not be sent), never queued. A move answered ``busy`` is sent again
    (same id): with ``--busy-retry hint`` (a well-behaved client) at the first slot after the
    answer's retry_ms, the slots in between counted as deferred; with ``slot``, at the next slot."""
    start = await wait_for(racer, p.RaceStart)
    racer.view = start.view
    racer.race = start.race
    racer.move_id = 0
    racer.undo_next = False
    interval = 1.0 / args.pace if args.pace > 0 else 0.0
    next_send = time.perf_counter() + racer.rng.random() * interval
    again: str | None = None  # a move answered busy, to send again with the same id
    while racer.view is not None and racer.view.status == "playing":
        now = time.perf_counter()
        if now >= deadline:
            racer.move_id += 1
            await racer.send(p.Move(id=racer.move_id, move="resign"))
            break
        if interval:
            if next_send > now:
                await asyncio.sleep(next_send - now)
            # This send takes the slot it was due in; the slots that passed since are skipped
            # (the racer still waited for its answer) or late (the generator itself was behind).
            missed = int((time.perf_counter() - next_send) / interval)
            if missed and stats.measuring:
                waiting = min(missed, int((now - next_send) / interval)) if now > next_send else 0
                stats.skipped += waiting
                stats.late += missed - waiting
            next_send += (missed + 1) * interval
        if again is None:
            move = next_move(racer)
            racer.move_id += 1
        else:
            move, again = again, None
        frame = p.encode(p.Move(id=racer.move_id, move=move))
        sent = time.perf_counter()
        assert racer.ws is not None
        await racer.ws.send(frame)
        counted = stats.measuring  # a move sent in the window is timed to its answer, even past the window
        if counted:
            stats.sent += 1
        refused: str | None = None  # the code of this move's rejection
        while True:
            data = await racer.recv_frame()
            msg = p.decode_server(data)
            if isinstance(msg, p.MoveOk) and msg.id == racer.move_id:
                acked = time.perf_counter()
                if counted:
                    stats.answer_latency.append(acked - sent)
                # Protocol 2: the changes, applied to the board (the check value is left to the
                # real clients and the tests: the load generator keeps its own CPU small).
                cards_before = racer.view.foundation_cards
                racer.view = msg.board_after(racer.view)
                racer.undo_next = racer.args.workload == "home-undo" and move == home_move_played(move)
                stats.race_moves += 1
                if stats.measuring:
                    stats.acks += 1
                    stats.undos += move == "undo"
                    stats.room_acks[racer.room_code] += 1
                    stats.ack_bytes += len(data)
                    stats.move_bytes += len(frame)
                    stats.ack_latency.append(acked - sent)
                    for cards in range(cards_before + 1, racer.view.foundation_cards + 1):
                        stats.card_times[(racer.player_id, racer.race, cards)] = (sent, acked)
                break
            if isinstance(msg, p.MoveRejected) and msg.id == racer.move_id:
                answered = time.perf_counter()
                if counted:
                    stats.answer_latency.append(answered - sent)
                    stats.window_rejections[msg.code] += 1
                stats.rejected += 1
                stats.error_codes[msg.code] += 1
                refused = msg.code
                if msg.code != p.BUSY:
                    racer.undo_next = False  # never the same refused undo again and again
                if msg.code == p.BUSY:
                    again = move
                    hint = RETRY_MS.search(msg.reason.encode())
                    if hint is None:
                        stats.busy_without_hint += 1
                    elif interval and args.busy_retry == "hint":
                        resume = answered + int(hint.group(1)) / 1000
                        if resume > next_send:
                            deferred = int((resume - next_send) / interval) + 1
                            next_send += deferred * interval
                            if stats.measuring:
                                stats.deferred += deferred
                    elif not interval:
                        await asyncio.sleep(int(hint.group(1)) / 1000 if hint else 0.0)
                break
            if isinstance(msg, p.Error):
                stats.errors += 1
                stats.error_codes[msg.code] += 1
        if refused == p.WRONG_PHASE:
            # The game is over though the bot's view says playing (the worker's exact check found it
            # blocked: the racer's new board came as a race_start this loop does not read), or the
            # race is: resending at once would only spin on wrong_phase answers until the results.
            break
    # Drain until the race's results, so the next race starts cleanly.
    await wait_for(racer, p.Results)


LEADERBOARD_TAG = b"\xa4type\xableaderboard"  # how a leaderboard frame starts, after the map header


async def spectate(spectator: Racer, code: str, stats: Stats) -> None:
    seen: dict[str, tuple[int, int]] = {}  # player id -> (race, cards) last shown
    spectator.spectator = True
    with contextlib.suppress(Exception):  # the connection closes at the end of the run
        while True:
            frame = await spectator.recv_frame()
            # Only leaderboards are decoded: room snapshots of a crowded room are large, and
            # decoding each at every spectator would make the generator the bottleneck.
            if frame[1:18] != LEADERBOARD_TAG:
                continue
            msg = p.decode_server(frame)
            if not isinstance(msg, p.Leaderboard):
                continue
            now = time.perf_counter()
            stats.leaderboards += 1
            first = stats.first_arrival.setdefault((code, msg.race, msg.version), now)
            if stats.measuring:
                stats.spectator_leaderboards += 1
                stats.delivery_spread.append(now - first)
            for row in msg.racers:
                race, last = seen.get(row.player_id, (msg.race, 1))
                if race != msg.race:
                    last = 1  # a new race: one card (the base card) is home at the start
                seen[row.player_id] = (msg.race, row.cards)
                if not stats.measuring:
                    continue
                for cards in range(last + 1, row.cards + 1):
                    times = stats.card_times.get((row.player_id, msg.race, cards))
                    if times is not None:
                        stats.fanout_from_send.append(now - times[0])
                        stats.fanout_from_ack.append(now - times[1])
                        stats.fanout_first_from_ack.append(first - times[1])


async def wait_for_setup(
    done: Callable[[], bool], tasks: list[asyncio.Task[Any]], what: str, started: float, timeout: float
) -> None:
    """Poll until ``done()``; fail fast if a set-up task failed or the set-up is too slow."""
    while not done():
        await asyncio.sleep(0.05)
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        if failed:
            raise RuntimeError(f"{what} failed: {failed[0].exception()!r}")
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"{what} took more than {timeout:g} s")


async def run_server_load(args: argparse.Namespace) -> dict[str, Any]:
    stats = Stats()
    rng = random.Random(args.seed)
    rooms: list[tuple[list[Racer], list[Racer]]] = []
    index = 0
    for room_index in range((args.racers + args.room_size - 1) // args.room_size):
        size = min(args.room_size, args.racers - room_index * args.room_size)
        members = []
        for _ in range(size):
            index += 1
            members.append(Racer(index, args, stats, random.Random(rng.random())))
        rooms.append((members, []))
    for s in range(args.spectators):
        index += 1
        rooms[s % max(1, min(args.spectator_rooms, len(rooms)))][1].append(
            Racer(index, args, stats, random.Random(rng.random()))
        )
    everyone = [c for racers, spectators in rooms for c in racers + spectators]
    ready = asyncio.Event()
    setup_started = time.perf_counter()
    deadline_box = [setup_started + 3600.0]  # set for real once every room is set up
    setup_slots = asyncio.Semaphore(args.setup_concurrency)
    room_tasks = [
        asyncio.create_task(run_room(i, racers, spectators, args, stats, deadline_box, ready, setup_slots))
        for i, (racers, spectators) in enumerate(rooms)
    ]
    try:
        # Wait for every connection to be in its room, then run: warm-up, then the measured window.
        await wait_for_setup(
            lambda: all(r.room_code for racers, _ in rooms for r in racers),
            room_tasks,
            "room set-up",
            setup_started,
            args.setup_timeout,
        )
        setup_seconds = time.perf_counter() - setup_started
        started = time.perf_counter()
        deadline_box[0] = started + args.warmup + args.duration
        ready.set()
        await asyncio.sleep(args.warmup)
        stats.measuring = True
        gc.disable()  # a collector pause here would be counted as server latency
        mark("window-start")
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.sleep(args.duration)
        window = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        stats.measuring = False
        mark("window-end")
        gc.enable()
        for t in room_tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                stats.failures.append(repr(t.exception()))
    finally:
        for t in room_tasks:
            t.cancel()
        await asyncio.gather(*room_tasks, return_exceptions=True)
        await close_all(everyone)
    ack_bytes = stats.ack_bytes / stats.acks if stats.acks else None
    # A spectator's frames per move accepted in the room it watches, over every spectator.
    watched_moves = sum(stats.room_acks.get(racers[0].room_code, 0) * len(specs) for racers, specs in rooms)
    return {
        "mode": "server",
        "racers": args.racers,
        "spectators": args.spectators,
        "spectator_rooms": min(args.spectator_rooms, len(rooms)) if args.spectators else 0,
        "room_size": args.room_size,
        "pace": args.pace,
        "workload": args.workload,
        "accepted_undos": stats.undos,
        "setup_seconds": round(setup_seconds, 2),
        "window_seconds": round(window, 2),
        "moves_per_second": round(stats.acks / window, 1),
        "accepted_moves": stats.acks,
        "rejected": stats.rejected,
        "errors": stats.errors,
        "error_codes": dict(stats.error_codes),
        "failures": stats.failures[:5],
        "races_finished": stats.races,
        "moves_per_race_racer": round(stats.race_moves / (stats.races * args.room_size), 1) if stats.races else None,
        "move_frame_bytes": round(stats.move_bytes / stats.acks, 1) if stats.acks else None,
        "move_ok_frame_bytes": round(ack_bytes, 1) if ack_bytes else None,
        "racer_frames_per_move": round(stats.racer_frames / stats.acks, 3) if stats.acks else None,
        "racer_bytes_per_move": round(stats.racer_bytes / stats.acks, 1) if stats.acks else None,
        "spectator_frames_per_move": round(stats.spectator_frames / watched_moves, 3) if watched_moves else None,
        "spectator_bytes_per_move": round(stats.spectator_bytes / watched_moves, 1) if watched_moves else None,
        "spectator_leaderboards_per_s": (
            round(stats.spectator_leaderboards / args.spectators / window, 2) if args.spectators else None
        ),
        "ack_latency_ms": summary_ms(stats.ack_latency),
        # Every move sent in the window and answered (accepted or rejected), and how fast.
        "moves_sent": stats.sent,
        "sends_skipped": stats.skipped,
        "sends_deferred": stats.deferred,
        "sends_late": stats.late,
        "busy_without_hint": stats.busy_without_hint,
        "busy_retry": args.busy_retry,
        "answer_latency_ms": summary_ms(stats.answer_latency),
        "answered_within_1s": sum(1 for x in stats.answer_latency if x <= 1.0),
        "window_rejections": dict(stats.window_rejections),
        "fanout_from_send_ms": summary_ms(stats.fanout_from_send),
        "fanout_from_ack_ms": summary_ms(stats.fanout_from_ack),
        "fanout_coalescing_ms": summary_ms(stats.fanout_first_from_ack),
        "fanout_delivery_spread_ms": summary_ms(stats.delivery_spread),
        "leaderboards_received": stats.leaderboards,
        "generator_cpu_share": round(cpu / window, 3),
        "generator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


async def run_echo_load(args: argparse.Namespace) -> dict[str, Any]:
    # The frame a racer sends: a move message (the echo server pads its reply to a move_ok's size).
    frame = p.encode(p.Move(id=123, move="waste>t3"))
    latencies: list[float] = []
    counts = [0]
    reply_bytes = [0]
    measuring = [False]
    stop_at = [time.perf_counter() + 3600.0]
    opened = [0]
    ready = asyncio.Event()

    slots = asyncio.Semaphore(args.setup_concurrency)

    async def one(rng: random.Random) -> None:
        async with slots:  # a few handshakes at a time, as for the race server
            ws = await connect(args.url, compression=None, max_size=2**20, open_timeout=60, close_timeout=CLOSE_TIMEOUT)
        async with ws:
            opened[0] += 1
            await ready.wait()
            interval = 1.0 / args.pace if args.pace > 0 else 0.0
            next_send = time.perf_counter() + rng.random() * interval
            while time.perf_counter() < stop_at[0]:
                if interval:
                    now = time.perf_counter()
                    if next_send > now:
                        await asyncio.sleep(next_send - now)
                    next_send = max(next_send + interval, time.perf_counter() - interval)
                sent = time.perf_counter()
                await ws.send(frame)
                reply = await ws.recv()
                if measuring[0]:
                    counts[0] += 1
                    reply_bytes[0] += len(reply)
                    latencies.append(time.perf_counter() - sent)

    rng = random.Random(args.seed)
    tasks = [asyncio.create_task(one(random.Random(rng.random()))) for _ in range(args.racers)]
    setup_started = time.perf_counter()
    await wait_for_setup(lambda: opened[0] >= args.racers, tasks, "echo set-up", setup_started, args.setup_timeout)
    setup_seconds = time.perf_counter() - setup_started
    stop_at[0] = time.perf_counter() + args.warmup + args.duration
    ready.set()
    await asyncio.sleep(args.warmup)
    measuring[0] = True
    gc.disable()
    mark("window-start")
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(args.duration)
    window = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    measuring[0] = False
    mark("window-end")
    gc.enable()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [repr(r) for r in results if isinstance(r, BaseException)]
    return {
        "mode": "echo",
        "racers": args.racers,
        "pace": args.pace,
        "setup_seconds": round(setup_seconds, 2),
        "window_seconds": round(window, 2),
        "moves_per_second": round(counts[0] / window, 1),
        "accepted_moves": counts[0],
        "errors": len(failures),
        "failures": failures[:5],
        "move_frame_bytes": len(frame),
        "move_ok_frame_bytes": round(reply_bytes[0] / counts[0], 1) if counts[0] else None,
        "ack_latency_ms": summary_ms(latencies),
        "generator_cpu_share": round(cpu / window, 3),
        "generator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


async def run_idle_load(args: argparse.Namespace) -> dict[str, Any]:
    """``--racers`` connections that say hello and then sit idle for ``--duration`` seconds
    (what a lobby full of people between races costs the server)."""
    slots = asyncio.Semaphore(args.setup_concurrency)
    conns: list[ClientConnection] = []
    refused: list[str] = []

    async def open_one(i: int) -> None:
        async with slots:
            try:
                ws = await connect(args.url, compression=None, open_timeout=60, close_timeout=CLOSE_TIMEOUT)
                conns.append(ws)
                if not args.bare:
                    await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name=f"idle-{i}", bot=True)))
                    msg = p.decode_server(await ws.recv(decode=False))
                    if not isinstance(msg, p.Welcome):
                        refused.append(type(msg).__name__)
            except Exception as exc:  # counted: how many the server would not hold
                refused.append(repr(exc)[:120])

    setup_started = time.perf_counter()
    await asyncio.gather(*(open_one(i) for i in range(args.racers)))
    setup_seconds = time.perf_counter() - setup_started
    mark("window-start")
    await asyncio.sleep(args.duration)
    held = sum(1 for ws in conns if ws.state.name == "OPEN")
    mark("window-end")
    await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
    return {
        "mode": "idle",
        "connections": args.racers,
        "hello": not args.bare,
        "held": held,
        "refused": len(refused),
        "refusals": refused[:5],
        "setup_seconds": round(setup_seconds, 2),
        "generator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Load generator for plot-server and the echo baseline.")
    parser.add_argument("mode", choices=["server", "echo", "idle", "sizes"])
    parser.add_argument("--url", default="ws://127.0.0.1:8765")
    parser.add_argument("--racers", type=int, default=100)
    parser.add_argument("--room-size", type=int, default=8)
    parser.add_argument("--pace", type=float, default=2.0, help="moves per second per racer; 0 = saturate")
    parser.add_argument("--spectators", type=int, default=0)
    parser.add_argument("--spectator-rooms", type=int, default=1, help="spread spectators over this many rooms")
    parser.add_argument("--spectator-concurrency", type=int, default=8, help="spectators joining at once, per room")
    parser.add_argument("--setup-concurrency", type=int, default=16, help="rooms set up at once")
    parser.add_argument("--setup-timeout", type=float, default=300.0, help="give up if set-up takes longer (s)")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--busy-retry",
        choices=["hint", "slot"],
        default="hint",
        help="a move answered busy is sent again after the answer's retry_ms (hint) or at the next slot (slot)",
    )
    parser.add_argument("--deal", type=int, default=None, help="room i deals N + i (default: random deals)")
    parser.add_argument(
        "--workload",
        choices=["play", "home-undo"],
        default="play",
        help="server mode: racers play on (play), or send a card home and undo it, move after move (home-undo)",
    )
    parser.add_argument("--bare", action="store_true", help="idle mode: connect only, no hello")
    args = parser.parse_args()
    if args.mode == "sizes":
        json.dump(typical_sizes(seed=args.seed), sys.stdout)
        sys.stdout.write("\n")
        return
    host = urlparse(args.url).hostname or ""
    if host not in LOOPBACK and not host.startswith("127."):
        parser.error("the load generator only targets loopback addresses")
    runner = {"server": run_server_load, "echo": run_echo_load, "idle": run_idle_load}[args.mode]
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(runner(args))
    else:
        result = uvloop.run(runner(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
