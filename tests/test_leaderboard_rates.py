"""Racers and spectators get the race's leaderboard at their own rates (docs/protocol.md, "Who
gets what"): racers at most every ``leaderboard_interval_ms``, spectators at most every
``spectator_leaderboard_interval_ms``, each with the rows changed since that audience's last one,
coalesced, never lost: a spectator's leaderboard converges to the racers' figures.

The room core through its test shell first (exact counts on a simulated clock), then a real
server with real WebSocket clients."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import replace

from support import (
    FAST,
    Client,
    Shell,
    board,
    eventually,
    fast_config,
    make_room,
    racing,
    running_server,
    start_race,
    toggling_moves,
    view_game,
)
from support import pid as pid_of

from server.core import CoreConfig
from server.core.events import LeaderboardTick, Send, Tick
from shared import protocol as p

# The default sends spectators leaderboards as often as racers; these tests take the slower
# spectators' rate a host sets for large audiences (--spectator-hz 5).
SPECTATORS_AT_5_HZ = CoreConfig(
    countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000, spectator_leaderboard_interval_ms=200
)

Figures = list[tuple[str, int, str, int, bool]]


def figures(board: p.Leaderboard | None) -> Figures:
    """What a leaderboard shows for each racer, in rank order (moves and times lag by design)."""
    assert board is not None
    return [(r.player_id, r.cards, r.status, r.rank, r.connected) for r in board.racers]


def boards_of(shell: Shell, conn: int) -> list[p.Leaderboard]:
    return [m for m in shell.take(conn) if isinstance(m, p.Leaderboard)]


def test_spectators_get_fewer_leaderboards_and_the_same_figures() -> None:
    shell = Shell(SPECTATORS_AT_5_HZ)
    racer_ms, spectator_ms = shell.config.leaderboard_interval_ms, shell.config.spectator_leaderboard_interval_ms
    assert spectator_ms > racer_ms
    conns, code = racing(shell)
    watcher = shell.hello("Wendy")
    watcher_id = pid_of(shell, watcher)
    shell.send(watcher, p.Join(code=code, role=p.SPECTATOR))
    shell.advance(1000)
    boards_of(shell, conns[1])
    boards_of(shell, watcher)
    opening, home = toggling_moves()
    move_id = 1
    for move in opening:
        shell.move(conns[0], move_id, move)
        move_id += 1
    # After a quiet spell a change goes out with the next tick (the racers' interval), not a
    # whole spectators' interval later.
    shell.move(conns[0], move_id, home)
    move_id += 1
    shell.advance(racer_ms)
    assert len(boards_of(shell, watcher)) == 1
    boards_of(shell, conns[1])
    # Ann's cards change with every move for 3 s: one move every 20 ms.
    window_ms = 3000
    for i in range(1, window_ms // 20 + 1):
        reply = shell.move(conns[0], move_id, home if i % 2 == 0 else "undo")
        assert isinstance(reply, p.MoveOk), reply
        move_id += 1
        shell.advance(20)
    to_racer, to_spectator = boards_of(shell, conns[1]), boards_of(shell, watcher)
    assert all(b.partial for b in to_racer + to_spectator)  # the changed rows only (no 5 s refresh yet)
    # At most one per interval each (plus the one a tick may fire at the window's edge) ...
    assert len(to_racer) <= window_ms // racer_ms + 1
    assert len(to_spectator) <= window_ms // spectator_ms + 1
    # ... and the racers' rate is not slowed to the spectators': a change each tick reaches them
    # (a spectators' tick may find the cards back where its last one left them: nothing to send).
    assert len(to_racer) >= window_ms // racer_ms - 2
    assert 1 <= len(to_spectator) < len(to_racer)
    # Coalesced, never lost: once the spectators' tick has run, both show the core's figures.
    shell.advance(spectator_ms)
    race = shell.core.rooms[code].race
    assert race is not None
    truth = figures(p.Leaderboard(race=1, version=0, racers=shell.core._rows(race, final=False)))
    assert figures(shell.leaderboards[watcher]) == truth == figures(shell.leaderboards[conns[1]])
    # Each tick goes to one audience: the racers' to the racers, the spectators' to the spectators.
    members = shell.core.rooms[code].members
    audiences = {
        frozenset(s.players)
        for s in shell.effects
        if isinstance(s, Send) and isinstance(s.message, p.Leaderboard) and len(s.players) > 1
    }
    racer_ids = frozenset(pid for pid, m in members.items() if m.role == p.RACER)
    assert audiences == {racer_ids}  # the one spectator's ticks go to it alone (one player)
    spectator_sends = [
        s for s in shell.effects if isinstance(s, Send) and isinstance(s.message, p.Leaderboard) and len(s.players) == 1
    ]
    assert spectator_sends and all(s.players == (watcher_id,) for s in spectator_sends)


def test_a_room_without_spectators_schedules_no_spectator_ticks_and_a_newcomer_gets_the_whole_board() -> None:
    shell = Shell(SPECTATORS_AT_5_HZ)
    conns, code = racing(shell)
    room = shell.core.rooms[code]
    opening, home = toggling_moves()
    for move_id, move in enumerate([*opening, home], start=1):
        shell.move(conns[0], move_id, move)
    shell.advance(shell.config.spectator_leaderboard_interval_ms * 2)
    feed = room.race.spectators_feed if room.race is not None else None
    assert feed is not None and feed.sent == {} and not feed.behind and not feed.stale  # nothing owed
    shell.move(conns[0], len(opening) + 2, "undo")  # a change nobody watches yet
    watcher = shell.hello("Wendy")
    shell.send(watcher, p.Join(code=code, role=p.SPECTATOR))
    joined = boards_of(shell, watcher)
    assert len(joined) == 1 and not joined[0].partial  # the catch-up: the whole one, as of now
    shell.move(conns[0], len(opening) + 3, home)
    shell.advance(shell.config.spectator_leaderboard_interval_ms)
    after = boards_of(shell, watcher)
    assert after and not after[0].partial  # the feed starts whole for its first audience
    assert figures(shell.leaderboards[watcher]) == figures(shell.leaderboards[conns[1]])


def test_moves_that_change_nothing_a_row_shows_need_no_tick_and_the_whole_board_follows() -> None:
    """A move that sends no card home (and changes no status) changes nothing a partial leaderboard
    carries: the room schedules no leaderboard tick for it (no wake-up, no rows ranked), and its
    moves count reaches everyone with the next whole leaderboard, ``leaderboard_full_ms`` after
    the last. A move that sends a card home goes out with the next tick, as ever."""
    shell = Shell(SPECTATORS_AT_5_HZ)
    conns, code = racing(shell, ("Ann", "Bob"))
    watcher = shell.hello("Wendy")
    shell.send(watcher, p.Join(code=code, role=p.SPECTATOR))
    shell.advance(1000)
    room = shell.core.rooms[code]
    assert room.race is not None and not room.race.lb_dirty
    for conn in (conns[1], watcher):
        boards_of(shell, conn)
    ann = pid_of(shell, conns[0])
    game = room.race.racers[ann].game.copy()
    opening: list[str] = []  # cards from the stock to the waste: five at least, until one can go home
    while len(opening) < 5 or not any(">f" in m for m in game.legal_moves()):
        opening.append("stock>waste")
        game.play("stock>waste")
    home = next(m for m in game.legal_moves() if ">f" in m)
    game.play(home)
    feeds = (room.race.racers_feed, room.race.spectators_feed)
    for move_id, move in enumerate(opening, start=1):
        assert isinstance(shell.move(conns[0], move_id, move), p.MoveOk)
        # The whole one's deadline only, on the node's shared leaderboard tick.
        whole_at = min(shell.core._slot(f.full_ms) for f in feeds) + shell.config.leaderboard_full_ms
        assert not room.race.lb_dirty and shell.core._leaderboards[code] == whole_at == shell.leaderboard_wake
        shell.advance(20)
    assert boards_of(shell, conns[1]) == [] and boards_of(shell, watcher) == []
    last_whole = room.race.racers_feed.full_ms
    shell.advance(last_whole + shell.config.leaderboard_full_ms - shell.now)
    for conn in (conns[1], watcher):
        whole = boards_of(shell, conn)
        assert [b.partial for b in whole] == [False], whole
        assert {r.player_id: r.moves for r in whole[0].racers}[ann] == len(opening)
    assert isinstance(shell.move(conns[0], len(opening) + 1, home), p.MoveOk)
    assert room.race.lb_dirty  # a card home: the next tick carries Ann's row
    shell.advance(shell.config.spectator_leaderboard_interval_ms)
    for conn in (conns[1], watcher):
        rows = [r for b in boards_of(shell, conn) for r in b.racers]
        assert [(r.player_id, r.cards) for r in rows] == [(ann, game.foundation_cards)], rows


def advance_counting(shell: Shell, ms: int) -> tuple[list[int], int]:
    """``Shell.advance``, counting what fired: the times of the node's shared leaderboard ticks, and
    the number of rooms' own wake-ups."""
    target = shell.now + ms
    shared: list[int] = []
    rooms = 0
    while (wake := shell.next_wake(target, shell.now)) is not None:
        shell.now = wake.now
        if isinstance(wake, LeaderboardTick):
            shared.append(wake.now)
        elif isinstance(wake, Tick):
            rooms += 1
        shell.run(wake)
    shell.now = target
    return shared, rooms


def test_the_rooms_of_a_node_share_one_leaderboard_tick() -> None:
    """Every room's leaderboard ticks on the node's shared tick: one event for all the rooms due,
    not a timer and an event per room. Changes in rooms at different phases, after a quiet spell
    or while changes keep coming, go out together on the edges of the interval's slots: one tick
    per slot for the node, each room at most once per interval, no change waiting longer than one."""
    shell = Shell()
    interval = shell.config.leaderboard_interval_ms
    rooms = [racing(shell, (f"Ann{i}", f"Bob{i}")) for i in range(3)]
    opening, home = toggling_moves()
    for conns, _ in rooms:
        for move_id, move in enumerate(opening, start=1):
            assert isinstance(shell.move(conns[0], move_id, move), p.MoveOk)
    shell.advance(shell.config.leaderboard_full_ms + interval)  # the whole ones the opening owes
    for conns, _ in rooms:
        boards_of(shell, conns[1])
    move_id = len(opening) + 1
    shell.advance(interval // 3)  # off a slot's edge
    for conns, _ in rooms:
        assert isinstance(shell.move(conns[0], move_id, home), p.MoveOk)
    # After a quiet spell: at the slot's edge, one shared tick for the three rooms.
    edge = shell.now - shell.now % interval + interval
    assert shell.leaderboard_wake == edge
    shared, own = advance_counting(shell, edge - shell.now)
    assert shared == [edge] and own == 0
    assert [len(boards_of(shell, conns[1])) for conns, _ in rooms] == [1, 1, 1]
    # Then each room's racer sends a card home or takes it back every 20 ms, the rooms 6 ms apart.
    moved: list[int] = []
    for step in range(50):
        for conns, _ in rooms:
            ticks, own = advance_counting(shell, 6)
            shared += ticks
            assert own == 0  # a leaderboard needs no room's own wake-up
            move_id += 1
            assert isinstance(shell.move(conns[0], move_id, "undo" if step % 2 == 0 else home), p.MoveOk)
            moved.append(shell.now)
        shared += advance_counting(shell, 2)[0]
    shared += advance_counting(shell, interval)[0]
    later = shared[1:]
    assert all(t % interval == 0 for t in shared), shared  # on the slots' edges ...
    assert all(b - a == interval for a, b in itertools.pairwise(shared)), shared  # ... one per slot
    assert later[0] - interval < moved[0] and later[-1] - interval < moved[-1] <= later[-1]
    # Each tick served every room (a tick whose slot saw an even number of toggles finds its
    # cards where they were: nothing to send), and every change went out by the next tick.
    counts = [len(boards_of(shell, conns[1])) for conns, _ in rooms]
    assert all(len(later) - 1 <= count <= len(later) for count in counts), (counts, len(later))
    assert all(0 < min(t for t in later if t >= at) - at <= interval for at in moved)


# Racers at 10 Hz, spectators at 2.5 Hz: rates a loaded machine still tells apart. The server runs
# in the test's process; at FAST's 20 and 6.7 Hz, with four busy loops on the 2 cores, its turns
# came ~200 ms apart and the two audiences got nearly as many frames (10 to 8, 13 to 7).
REAL_RATES = replace(FAST, leaderboard_interval_ms=100, spectator_leaderboard_interval_ms=400)


async def test_a_real_spectator_converges_at_its_own_rate_while_racers_keep_theirs() -> None:
    async with running_server(config=fast_config(core=REAL_RATES)) as server:
        core = server.config.core
        racers, code = await make_room(server, ["Ann", "Bob"])
        watcher = await Client.open(server, "Wendy")
        await watcher.hello("Wendy")
        await watcher.send(p.Join(code=code, role=p.SPECTATOR))
        await watcher.expect(p.Room, timeout=30.0)
        starts = await start_race(racers)
        ann = racers[0]
        view = starts[0].view
        assert view is not None
        # Ann turns the stock until a card can go home (the room's deal is random), not from the
        # reserve: a move that uncovers a reserve card cannot be undone (docs/rules.md; one run in
        # about twelve dealt a reserve card that could go home first, and the undo was refused) ...
        move_id = 1

        def homeward(move: str) -> bool:
            return ">f" in move and not move.startswith("reserve")

        while not (home := next((m for m in view_game(view).legal_moves() if homeward(m)), "")):
            await ann.send(p.Move(id=move_id, move="stock>waste"))
            view = board(await ann.expect(p.MoveOk, timeout=30.0))
            move_id += 1
        # ... then plays it and undoes it, about every 15 ms for 3 s: every racers' and
        # spectators' tick has a change to send.
        frames_before = {c.label: len(c.frames) for c in (*racers, watcher)}
        started = time.monotonic()
        toggles = 0
        while time.monotonic() - started < 3.0:
            await ann.send(p.Move(id=move_id, move=home if toggles % 2 == 0 else "undo"))
            assert isinstance(await ann.expect(p.MoveOk, timeout=30.0), p.MoveOk)
            move_id += 1
            toggles += 1
            await asyncio.sleep(0.015)
        span = time.monotonic() - started

        def leaderboards(client: Client) -> int:
            got = client.frames[frames_before[client.label] :]
            return sum(isinstance(p.decode_server(f), p.Leaderboard) for f in got)

        # Counted as the moves end (the convergence below may wait through whole refreshes).
        to_spectator, to_bob = leaderboards(watcher), leaderboards(racers[1])
        # Coalesced, never lost: the spectator's rows come to show what the racers' show.
        await eventually(
            lambda: figures(watcher.leaderboard) == figures(racers[1].leaderboard) == figures(ann.leaderboard),
            timeout=30.0,
            what="the spectator's leaderboard converges to the racers'",
        )
        # Bounded by the rate (half a second of slack for delivery jitter on a busy machine).
        assert to_spectator <= (span + 0.5) * 1000 / core.spectator_leaderboard_interval_ms + 1, to_spectator
        assert to_bob <= (span + 0.5) * 1000 / core.leaderboard_interval_ms + 1, to_bob
        # Not strictly more: a tick that finds the toggled card back where it was sends nothing,
        # so on a busy machine the racers' count fell to the spectator's (7 and 7) in a few runs,
        # before the node-wide tick as after it. The bounds above hold each audience to its rate.
        assert to_bob >= to_spectator >= 1, (to_bob, to_spectator)
        for client in (*racers, watcher):
            await client.close()
