"""The room core as a pure state machine: plain function calls, no sockets, no clock.

The test shell (:class:`server.testing.shell.Shell`) carries out the effects the way the real shell
does (store writes are a dict there, acknowledged immediately unless a test holds them back), so
each test reads as a session: hello, create, join, ready, start, moves, results.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator

import msgspec
import pytest
from support import DEAL, SeededEntropy, Shell, board, lobby, phase_of, pid, racing, record_of

from server.core import CoreConfig, Entropy, ServerCore
from server.core.events import (
    Disconnected,
    ExpireRoom,
    LogReloaded,
    MovePersistFailed,
    Send,
)
from server.core.records import LogEntry, RoomRecord, hash_token
from shared import protocol as p
from shared.engine import Game
from shared.fairplay import check_commitment


def first_legal(deal: int = DEAL, played: tuple[str, ...] = ()) -> str:
    game = Game(deal)
    for move in played:
        game.play(move)
    return next(m for m in game.legal_moves() if m != "stock>waste") if game.legal_moves() else "stock>waste"


# ====================================================================== hello


def test_hello_welcomes_with_an_id_and_a_secret_token() -> None:
    shell = Shell()
    conn = shell.hello("Ann")
    welcome = shell.welcome(conn)
    assert welcome.name == "Ann" and welcome.player_id and len(welcome.token) >= 22
    assert not welcome.resumed
    # The store keeps only the token's hash.
    assert hash_token(welcome.token) in shell.tokens
    assert welcome.token not in shell.tokens


def test_real_entropy_gives_unambiguous_codes_and_long_tokens() -> None:
    entropy = Entropy()
    codes = {entropy.room_code() for _ in range(200)}
    assert all(p.is_room_code(c) for c in codes) and len(codes) > 190
    assert len(entropy.token()) >= 22  # 16+ bytes of token_urlsafe
    assert entropy.deal() != entropy.deal()


@pytest.mark.parametrize(
    ("name", "code"), [("", p.NAME_INVALID), ("\x1b[31mred", p.NAME_INVALID), ("x" * 25, p.NAME_INVALID)]
)
def test_bad_names_are_refused(name: str, code: str) -> None:
    shell = Shell()
    conn = shell.hello(name)
    assert shell.error(conn).code == code
    assert shell.core.conns[conn] is None  # still not welcomed; may try again
    shell.say_hello(conn, "Fine")
    assert shell.welcome(conn).name == "Fine"


def test_version_1_is_refused_and_closed() -> None:
    """Protocol 2 changed move_ok: a version-1 client gets unsupported_version, then the close."""
    shell = Shell()
    conn = shell.hello("Ann", v=1)
    err = shell.error(conn)
    assert err.code == p.UNSUPPORTED_VERSION and "1" in err.message and "2" in err.message
    assert shell.closed == {conn: (1002, "unsupported protocol version")}
    assert not any(isinstance(m, p.Welcome) for m in shell.inbox[conn])


def test_bad_token() -> None:
    shell = Shell()
    conn = shell.hello("Ann", token="not-a-token")
    assert shell.error(conn).code == p.BAD_TOKEN


def test_messages_before_hello_and_hello_twice() -> None:
    shell = Shell()
    conn = shell.connect()
    shell.send(conn, p.CreateRoom())
    assert shell.error(conn).code == p.WRONG_PHASE and shell.error(conn).ref == "create_room"
    shell.send(conn, p.Ping(t=5))
    pong = shell.inbox[conn][-1]
    assert isinstance(pong, p.Pong) and pong.t == 5 and pong.server_time == shell.now
    shell.say_hello(conn, "Ann")
    shell.say_hello(conn, "Ann")
    assert shell.error(conn).code == p.WRONG_PHASE


# ====================================================================== rooms


def test_create_join_ready_and_room_snapshots_carry_versions() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    room = shell.room(conns[0])
    assert room.code == code and p.is_room_code(code)
    assert room.host == pid(shell, conns[0])
    assert [m.name for m in room.members] == ["Ann", "Bob", "Cy"]
    assert [m.ready for m in room.members] == [False, True, True]
    assert room.leak_proof and not room.chosen_deal
    versions = [m.version for m in shell.inbox[conns[0]] if isinstance(m, p.Room)]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    # The store has the room too (written behind), listed since it is not private.
    assert shell.rooms[code].members[-1].name == "Cy"


def test_room_snapshot_never_shows_a_chosen_deal_number() -> None:
    shell = Shell()
    conns, _code = lobby(shell, deal=123456789)
    room = shell.room(conns[1])
    assert room.chosen_deal
    assert "123456789" not in repr(room)


def test_join_errors() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"), max_racers=2)
    late = shell.hello("Dee")
    shell.send(late, p.Join(code="ZZZZZ"))
    assert shell.error(late).code == p.UNKNOWN_ROOM
    shell.send(late, p.Join(code=code.lower()))  # codes are case-insensitive
    assert shell.error(late).code == p.ROOM_FULL
    shell.send(late, p.Join(code=code, role="spectator"))
    assert shell.room(late).members[-1].role == p.SPECTATOR
    shell.send(conns[1], p.CreateRoom())
    assert shell.error(conns[1]).code == p.WRONG_PHASE


def test_bots_shown_as_bots_and_refused_where_not_allowed() -> None:
    shell = Shell()
    host = shell.hello("Ann")
    shell.send(host, p.CreateRoom(options=p.RoomOptions(bots_allowed=False)))
    code = shell.room(host).code
    bot = shell.hello("Robo", bot=True)
    shell.send(bot, p.Join(code=code))
    assert shell.error(bot).code == p.BOTS_NOT_ALLOWED
    shell.send(bot, p.Join(code=code, role="spectator"))
    assert shell.room(bot).members[-1].bot


def test_not_in_room_and_not_host() -> None:
    shell = Shell()
    conns, _code = lobby(shell)
    lone = shell.hello("Lone")
    for msg in (p.Ready(), p.Start(), p.Leave(), p.Kick(player_id="x"), p.EndRace(), p.Rematch()):
        shell.send(lone, msg)
        assert shell.error(lone).code == p.NOT_IN_ROOM
    for msg in (p.Start(), p.Kick(player_id=pid(shell, conns[2])), p.EndRace(), p.Rematch()):
        shell.send(conns[1], msg)
        assert shell.error(conns[1]).code == p.NOT_HOST


def test_start_needs_everyone_ready() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    shell.send(conns[2], p.Ready(ready=False))
    shell.send(conns[0], p.Start())
    err = shell.error(conns[0])
    assert err.code == p.NOT_READY and "Cy" in err.message
    assert phase_of(shell.core, code) == p.LOBBY


def test_kick_and_host_passes_on_leave() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    bob = pid(shell, conns[1])
    shell.send(conns[0], p.Kick(player_id="nobody"))
    assert shell.error(conns[0]).code == p.UNKNOWN_PLAYER
    shell.send(conns[0], p.Kick(player_id=pid(shell, conns[0])))
    assert shell.error(conns[0]).code == p.BAD_FIELD
    shell.send(conns[0], p.Kick(player_id=pid(shell, conns[2])))
    kicked = shell.last(conns[2], p.Kicked)
    assert isinstance(kicked, p.Kicked) and kicked.reason == "host"
    assert [m.name for m in shell.room(conns[0]).members] == ["Ann", "Bob"]
    assert shell.players[pid(shell, conns[2])].room is None
    shell.send(conns[0], p.Leave())
    assert isinstance(shell.inbox[conns[0]][-1], p.Left)
    assert shell.room(conns[1]).host == bob
    shell.send(conns[1], p.Leave())
    assert not shell.core.has_room(code)  # empty rooms close


def test_room_code_collision_in_the_store_retries() -> None:
    entropy = SeededEntropy()
    shell = Shell(entropy=entropy)
    shell.rooms["AAAAA"] = RoomRecord(
        code="AAAAA", options=p.RoomOptions(), host="x", phase=p.LOBBY, version=1, race_number=1, members=[],
        race=None, pending_deal=None, created_ms=0, last_activity_ms=0,
    )  # fmt: skip
    entropy.codes = ["AAAAA", "BBBBB"]
    conn = shell.hello("Ann")
    shell.send(conn, p.CreateRoom())
    assert shell.room(conn).code == "BBBBB"


def test_room_limit() -> None:
    shell = Shell(CoreConfig(max_rooms=1))
    lobby(shell, ("Ann",))
    other = shell.hello("Bob")
    shell.send(other, p.CreateRoom())
    assert shell.error(other).code == p.SERVER_FULL


def test_a_newer_resume_supersedes_the_older_connection() -> None:
    """One connection per player: the newer resume wins; the older is told, closed (4001) and
    forgotten (its frames and its disconnection change nothing)."""
    shell = Shell()
    (ann, bob, _cy), code = lobby(shell)
    token = shell.welcome(ann).token
    newer = shell.hello("Ann", token=token)
    assert shell.welcome(newer).resumed and shell.welcome(newer).room == code
    error = shell.last(ann, p.Error)
    assert isinstance(error, p.Error) and error.code == p.SUPERSEDED and error.ref == "hello"
    assert shell.closed[ann] == (p.CLOSE_SUPERSEDED, "superseded by a newer connection")
    player = shell.core.players[pid(shell, newer)]
    assert player.conns == {newer} and ann not in shell.core.conns
    # The old connection's late frames are ignored; the room and the seat stay the newer one's.
    shell.take(ann)
    shell.send(ann, p.Leave())
    shell.disconnect(ann)
    assert shell.take(ann) == []
    room = shell.core.rooms[code]
    assert pid(shell, newer) in room.members and room.members[pid(shell, newer)].left_ms is None
    shell.send(newer, p.Ready(ready=True))
    assert shell.core.rooms[code].members[pid(shell, newer)].ready
    assert pid(shell, bob) in room.members


def test_hosting_passes_to_a_racer_before_a_spectator() -> None:
    shell = Shell()
    (ann, bob), code = lobby(shell, ("Ann", "Bob"))
    watcher = shell.hello("Wendy")
    shell.send(watcher, p.Join(code=code, role=p.SPECTATOR))
    shell.disconnect(bob)  # Bob is away (within his grace): still a racer, and before a connected spectator
    shell.send(ann, p.Leave())
    assert record_of(shell.core, code).host == pid(shell, bob)


# ====================================================================== race


def test_countdown_then_race_start_with_commitment_and_own_view_only() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    spectator = shell.hello("Spec")
    shell.send(spectator, p.Join(code=code, role="spectator"))
    shell.send(conns[0], p.Start())
    countdown = shell.last(conns[1], p.Countdown)
    assert isinstance(countdown, p.Countdown) and countdown.starts_at == shell.now + shell.config.countdown_ms
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    rejected = shell.inbox[conns[0]][-1]
    assert isinstance(rejected, p.MoveRejected) and rejected.code == p.WRONG_PHASE
    shell.advance(shell.config.countdown_ms)
    start = shell.last(conns[1], p.RaceStart)
    assert isinstance(start, p.RaceStart) and start.view == Game(DEAL).view() and start.seq == 0
    spec_start = shell.last(spectator, p.RaceStart)
    assert isinstance(spec_start, p.RaceStart) and spec_start.view is None
    assert start.commitment == spec_start.commitment and not start.chosen_deal
    shell.advance(shell.config.leaderboard_interval_ms)  # the race's first leaderboard: the node's next tick
    board = shell.leaderboards[spectator]
    assert [r.name for r in board.racers] == ["Ann", "Bob", "Cy"]


def test_moves_are_persisted_before_they_are_acknowledged() -> None:
    shell = Shell()
    conns, _code = racing(shell)
    shell.hold_persists = True
    shell.take(conns[0])
    shell.send(conns[0], p.Move(id=7, move="stock>waste"))
    assert shell.take(conns[0]) == []  # nothing until the store has it
    assert len(shell.held) == 1 and shell.held[0].expected_length == 0
    assert shell.held[0].entry == LogEntry("stock>waste", 0, 7)
    shell.release()
    ok = shell.inbox[conns[0]][-1]
    assert isinstance(ok, p.MoveOk) and ok.id == 7 and ok.seq == 1 and board(ok).stock == 77


def test_moves_queue_in_order_while_a_write_is_pending() -> None:
    shell = Shell()
    conns, code = racing(shell)
    shell.hold_persists = True
    for i in range(1, 4):
        shell.send(conns[0], p.Move(id=i, move="stock>waste"))
    assert len(shell.held) == 1  # one write in flight per racer
    while shell.held:
        shell.release()
    oks = [m for m in shell.inbox[conns[0]] if isinstance(m, p.MoveOk)]
    assert [(m.id, m.seq, board(m).stock) for m in oks] == [(1, 1, 77), (2, 2, 76), (3, 3, 75)]
    log = shell.logs[(code, 1, pid(shell, conns[0]))]
    assert [e.id for e in log] == [1, 2, 3]


def test_illegal_move_gets_the_engines_reason_and_changes_nothing() -> None:
    shell = Shell()
    conns, code = racing(shell)
    before = shell.core.rooms[code].race.racers[pid(shell, conns[0])].game.state_key()  # type: ignore[union-attr]
    msg = shell.move(conns[0], 1, "reserve>t0")
    assert isinstance(msg, p.MoveRejected) and msg.code == p.ILLEGAL_MOVE and "foundation" in msg.reason
    msg = shell.move(conns[0], 2, "banana")
    assert isinstance(msg, p.MoveRejected) and "not a move" in msg.reason
    after = shell.core.rooms[code].race.racers[pid(shell, conns[0])].game.state_key()  # type: ignore[union-attr]
    assert before == after
    assert shell.logs[(code, 1, pid(shell, conns[0]))] == []


def test_a_retried_move_id_is_never_applied_twice() -> None:
    shell = Shell()
    conns, code = racing(shell)
    shell.move(conns[0], 1, "stock>waste")
    again = shell.move(conns[0], 1, "stock>waste")
    assert isinstance(again, p.MoveOk) and again.duplicate and again.seq == 1 and board(again).stock == 77
    # Pending (not yet stored) retries are ignored: the ack will come once.
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=2, move="stock>waste"))
    shell.send(conns[0], p.Move(id=2, move="stock>waste"))
    assert len(shell.held) == 1
    shell.release()
    assert len(shell.logs[(code, 1, pid(shell, conns[0]))]) == 2


def test_undo_off_and_undo_barrier() -> None:
    shell = Shell()
    conns, _code = racing(shell, ("Ann", "Bob"), undo=False)
    msg = shell.move(conns[0], 1, "undo")
    assert isinstance(msg, p.MoveRejected) and "undo is off" in msg.reason


def test_leaderboard_is_coalesced_to_the_tick() -> None:
    shell = Shell()
    conns, _code = racing(shell)
    shell.advance(500)
    first = [m for m in shell.take(conns[1]) if isinstance(m, p.Leaderboard)]
    assert len(first) == 1 and not first[0].partial and len(first[0].racers) == 3  # the whole one first
    game = Game(DEAL)
    for i in range(1, 6):
        shell.move(conns[0], i, "stock>waste")
        game.play("stock>waste")
    boards = [m for m in shell.take(conns[1]) if isinstance(m, p.Leaderboard)]
    assert boards == []  # no leaderboard per move ...
    shell.advance(shell.config.leaderboard_interval_ms)
    # ... and none at the tick either: turning the stock changes no figure anyone is shown
    assert [m for m in shell.take(conns[1]) if isinstance(m, p.Leaderboard)] == []
    move_id = 6
    while not any(">f" in m for m in game.legal_moves()):
        shell.move(conns[0], move_id, "stock>waste")
        game.play("stock>waste")
        move_id += 1
    home = next(m for m in game.legal_moves() if ">f" in m)
    shell.move(conns[0], move_id, home)
    shell.advance(shell.config.leaderboard_interval_ms)
    boards = [m for m in shell.take(conns[1]) if isinstance(m, p.Leaderboard)]
    assert len(boards) == 1 and boards[0].partial  # one per tick, only the rows that changed
    ann = next(r for r in boards[0].racers if r.name == "Ann")
    assert ann.cards == 2 and ann.rank == 1 and ann.moves == move_id and boards[0].version == move_id
    assert "Cy" not in {r.name for r in boards[0].racers}  # Cy's cards, status and rank are as they were
    # The whole one again leaderboard_full_ms after the last, though nothing moves: every row's
    # moves and times are current again, and a client that missed a partial one catches up.
    shell.advance(shell.config.leaderboard_full_ms)
    boards = [m for m in shell.take(conns[1]) if isinstance(m, p.Leaderboard)]
    assert len(boards) == 1 and not boards[0].partial and len(boards[0].racers) == 3
    shell.advance(shell.config.leaderboard_full_ms * 3)
    assert [m for m in shell.take(conns[1]) if isinstance(m, p.Leaderboard)] == []  # then quiet
    # Progress only: a leaderboard carries no cards.
    assert set(p.LeaderboardRow.__struct_fields__) == {
        "player_id", "name", "bot", "cards", "moves", "status", "elapsed_ms", "rank", "connected", "ghost",
        "claimed",
    }  # fmt: skip
    assert [m for m in shell.effects if isinstance(m, Send) and isinstance(m.message, p.Leaderboard)][-1].droppable


def _play_to_cards(shell: Shell, conn: int, deal: int, target: int, start_id: int = 1) -> int:
    """Greedy: foundation moves first, else turn the stock, until ``target`` cards are up."""
    game = Game(deal)
    move_id = start_id
    while game.foundation_cards < target and not game.over:
        legal = game.legal_moves()
        move = next((m for m in legal if ">f" in m), None) or ("stock>waste" if game.stock else "resign")
        game.play(move)
        reply = shell.move(conn, move_id, move)
        assert isinstance(reply, p.MoveOk), reply
        move_id += 1
    return move_id


def test_ranking_by_cards_then_time_reached_and_results_reveal() -> None:
    deal = 1  # greedy play puts 3 cards up in 2 moves on this deal
    shell = Shell(entropy=SeededEntropy(deal=deal))
    conns, code = racing(shell)
    ann, bob, cy = (pid(shell, c) for c in conns)
    _play_to_cards(shell, conns[1], deal, 3)  # Bob first to 3 cards
    shell.advance(1000)
    _play_to_cards(shell, conns[0], deal, 3)  # Ann reaches it a second later
    shell.move(conns[2], 1, "stock>waste")  # Cy moved last, but has fewer cards
    shell.advance(shell.config.leaderboard_interval_ms)
    board = shell.leaderboards[conns[2]]
    assert [r.player_id for r in board.racers] == [bob, ann, cy]
    assert [r.cards for r in board.racers] == [3, 3, 1] and [r.rank for r in board.racers] == [1, 2, 3]
    shell.move(conns[0], 1000, "resign")
    shell.move(conns[1], 1000, "resign")
    shell.move(conns[2], 2, "resign")
    results = shell.last(conns[2], p.Results)
    assert isinstance(results, p.Results)
    assert results.ranking == [bob, ann, cy]
    assert results.deal == deal and check_commitment(deal, results.salt, results.commitment)
    assert set(results.records) == {ann, bob, cy}
    assert results.records[cy].moves == ["stock>waste", "resign"]
    assert {r.status for r in results.racers} == {"resigned"}
    assert phase_of(shell.core, code) == p.RESULTS


def test_winner_ranks_first_by_win_time() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    race = shell.core.rooms[code].race
    assert race is not None
    # Force a won game for Bob through the engine, then check the ranking function.
    bob = race.racers[pid(shell, conns[1])]
    bob.game.status = "won"
    bob.times = [5000]
    ann = race.racers[pid(shell, conns[0])]
    ann.game.foundation_cards = 50
    rows = shell.core._rows(race, final=True)
    assert [r.name for r in rows] == ["Bob", "Ann"] and rows[1].status == p.STOPPED


def test_time_limit_ends_the_race() -> None:
    shell = Shell()
    conns, _code = racing(shell, ("Ann", "Bob"), time_limit=10)
    shell.move(conns[0], 1, "stock>waste")
    shell.advance(10_000)
    results = shell.last(conns[1], p.Results)
    assert isinstance(results, p.Results) and {r.status for r in results.racers} == {p.STOPPED}
    late = shell.move(conns[0], 2, "stock>waste")
    assert isinstance(late, p.MoveRejected) and late.code == p.WRONG_PHASE


def test_race_end_waits_for_writes_in_flight() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    shell.send(conns[0], p.Move(id=2, move="stock>waste"))
    shell.send(conns[0], p.EndRace())
    queued = shell.inbox[conns[0]][-1]
    assert isinstance(queued, p.MoveRejected) and queued.id == 2
    assert phase_of(shell.core, code) == p.RACING
    shell.release()
    results = shell.last(conns[0], p.Results)
    assert isinstance(results, p.Results) and results.records[pid(shell, conns[0])].moves == ["stock>waste"]


def test_host_ends_the_countdown_back_to_lobby() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    shell.send(conns[0], p.Start())
    shell.send(conns[0], p.EndRace())
    assert phase_of(shell.core, code) == p.LOBBY
    shell.advance(5000)
    assert phase_of(shell.core, code) == p.LOBBY


def test_rematch_same_room_new_race() -> None:
    shell = Shell()
    conns, _code = racing(shell, ("Ann", "Bob"))
    for conn in conns:
        shell.move(conn, 1, "resign")
    shell.send(conns[0], p.Rematch(deal=99))
    room = shell.room(conns[1])
    assert room.phase == p.LOBBY and room.race == 2 and room.chosen_deal
    shell.send(conns[1], p.Ready())
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    start = shell.last(conns[1], p.RaceStart)
    assert isinstance(start, p.RaceStart) and start.race == 2 and start.view == Game(99).view()
    ok = shell.move(conns[1], 1, "stock>waste")  # move ids start afresh in a new race
    assert isinstance(ok, p.MoveOk) and not ok.duplicate


def test_disconnected_racer_forfeits_after_grace_and_can_resume_before() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    token = shell.welcome(conns[1]).token
    bob = pid(shell, conns[1])
    shell.move(conns[1], 1, "stock>waste")
    shell.run(Disconnected(conns[1], shell.now))
    assert not next(m for m in shell.room(conns[0]).members if m.player_id == bob).connected
    shell.advance(shell.config.grace_ms - 1)
    again = shell.hello("Bob", token=token)
    welcome = shell.welcome(again)
    assert welcome.resumed and welcome.player_id == bob and welcome.room == code
    start = shell.last(again, p.RaceStart)
    assert isinstance(start, p.RaceStart) and start.seq == 1 and start.view is not None and start.view.stock == 77
    # Retrying the move whose ack was lost applies nothing.
    dup = shell.move(again, 1, "stock>waste")
    assert isinstance(dup, p.MoveOk) and dup.duplicate and dup.seq == 1
    shell.run(Disconnected(again, shell.now))
    shell.advance(shell.config.grace_ms)
    assert shell.logs[(code, 1, bob)][-1].move == "resign"
    assert shell.logs[(code, 1, bob)][-1].id is None


def test_leaving_mid_race_resigns() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    shell.send(conns[1], p.Leave())
    assert shell.logs[(code, 1, pid(shell, conns[1]))][-1].move == "resign"
    shell.move(conns[0], 1, "resign")
    results = shell.last(conns[0], p.Results)
    assert isinstance(results, p.Results) and len(results.ranking) == 2


def test_idle_lobby_expires_and_members_are_told() -> None:
    shell = Shell(CoreConfig(lobby_idle_ms=60_000))
    conns, code = lobby(shell)
    shell.advance(60_000)
    assert not shell.core.has_room(code)
    kicked = shell.last(conns[1], p.Kicked)
    assert isinstance(kicked, p.Kicked) and kicked.reason == "idle"
    assert shell.players[pid(shell, conns[1])].room is None


def test_disconnected_lobby_member_removed_after_grace() -> None:
    shell = Shell()
    conns, _code = lobby(shell)
    shell.run(Disconnected(conns[2], shell.now))
    shell.advance(shell.config.member_grace_ms)
    assert [m.name for m in shell.room(conns[0]).members] == ["Ann", "Bob"]


def test_spectator_boards_after_delay_mark_room_not_leak_proof() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"), spectator_boards=5)
    spec = shell.hello("Spec")
    shell.send(spec, p.Join(code=code, role="spectator"))
    assert not shell.room(spec).leak_proof
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    shell.move(conns[0], 1, "stock>waste")
    shell.advance(1000)
    boards = [m for m in shell.take(spec) if isinstance(m, p.Boards)]
    assert all(b.boards[pid(shell, conns[0])].stock == 78 for b in boards)  # not yet: 5 s behind
    shell.advance(5000)
    boards = [m for m in shell.take(spec) if isinstance(m, p.Boards)]
    assert boards and boards[-1].boards[pid(shell, conns[0])].stock == 77
    # Racers never get anyone's board.
    assert not [m for m in shell.inbox[conns[1]] if isinstance(m, p.Boards)]


def test_leak_proof_room_sends_spectators_no_board() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    spec = shell.hello("Spec")
    shell.send(spec, p.Join(code=code, role="spectator"))
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    for i in range(1, 5):
        shell.move(conns[0], i, "stock>waste")
    shell.advance(10_000)
    for msg in shell.inbox[spec]:
        assert not isinstance(msg, p.Boards | p.MoveOk)
        if isinstance(msg, p.RaceStart):
            assert msg.view is None


def test_a_racer_cannot_watch_its_own_race() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    shell.send(conns[1], p.Join(code=code, role="spectator"))
    assert shell.error(conns[1]).code == p.WRONG_PHASE


def test_store_unavailable_on_append_waits_for_the_reloaded_log() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    effect = shell.held.pop()
    # The write landed, but the store's answer was lost.
    shell.logs[(code, 1, ann)].append(effect.entry)
    shell.take(conns[0])
    shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
    assert shell.take(conns[0]) == [] and shell.reloads
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    ok = shell.inbox[conns[0]][-1]
    assert isinstance(ok, p.MoveOk) and ok.id == 1 and ok.seq == 1
    # The write did not land: nothing applied, and the move is written again after a back-off.
    shell.take(conns[0])
    shell.send(conns[0], p.Move(id=2, move="stock>waste"))
    shell.held.pop()
    shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    assert shell.core.rooms[code].race.racers[ann].game.view().stock == 77  # type: ignore[union-attr]
    assert not [m for m in shell.take(conns[0]) if isinstance(m, p.MoveOk | p.MoveRejected)]
    shell.hold_persists = False
    shell.advance(shell.config.retry_first_ms)
    ok = shell.inbox[conns[0]][-1]
    assert isinstance(ok, p.MoveOk) and ok.id == 2 and ok.seq == 2


def test_conflicting_log_is_reloaded_and_the_move_rechecked() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    # Another process appended an entry (with this very client id) behind our back.
    shell.logs[(code, 1, ann)].append(LogEntry("stock>waste", 5, 1))
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    assert shell.reloads
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    ok = shell.inbox[conns[0]][-1]
    assert isinstance(ok, p.MoveOk) and ok.duplicate and ok.seq == 1
    assert len(shell.logs[(code, 1, ann)]) == 1


def test_a_fresh_core_rebuilds_the_race_from_the_store() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    token = shell.welcome(conns[0]).token
    for i in range(1, 4):
        shell.move(conns[0], i, "stock>waste")
    before = shell.core.rooms[code].race.racers[ann].game.state_key()  # type: ignore[union-attr]
    # A new process: same store, empty memory.
    shell.core = ServerCore(shell.config, SeededEntropy(seed=2))
    shell.conns_of.clear()
    record = shell.rooms[code]
    logs = {r.player_id: list(shell.logs[(code, 1, r.player_id)]) for r in record.race.racers}  # type: ignore[union-attr]
    shell.apply(shell.core.load_room(record, logs, shell.now))
    rebuilt = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    assert rebuilt.game.state_key() == before and rebuilt.ids == {1: 1, 2: 2, 3: 3}
    conn = shell.hello("Ann", token=token)
    assert shell.welcome(conn).resumed
    dup = shell.move(conn, 3, "stock>waste")
    assert isinstance(dup, p.MoveOk) and dup.duplicate  # not applied twice after a restart either
    ok = shell.move(conn, 4, "stock>waste")
    assert isinstance(ok, p.MoveOk) and ok.seq == 4
    # Bob never came back: he forfeits after the grace period counted from the reload.
    shell.advance(shell.config.grace_ms)
    assert shell.logs[(code, 1, bob)][-1].move == "resign"


def _sessions() -> Iterator[int]:
    yield from range(12)


@pytest.mark.parametrize("seed", list(_sessions()))
def test_random_sessions_never_break_invariants(seed: int) -> None:
    """Random message storms (valid and not) from several clients: the core never raises, every
    log replays to the racer's game, and acknowledged sequence numbers only grow."""
    rng = random.Random(seed)
    shell = Shell(entropy=SeededEntropy(seed, deal=rng.getrandbits(64)))
    conns, code = lobby(shell, ("Ann", "Bob", "Cy"))
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    extra = shell.hello("Eve")
    everyone = [*conns, extra]
    deal = shell.core.rooms[code].race.record.deal  # type: ignore[union-attr]
    next_id: dict[int, int] = defaultdict(int)
    for step in range(300):
        conn = rng.choice(everyone)
        roll = rng.random()
        room = shell.core.rooms.get(code)
        player = shell.core.conns.get(conn)
        racer = room.race.racers.get(player) if room and room.race and player else None
        if roll < 0.6 and racer is not None:
            legal = racer.game.legal_moves() or ["stock>waste"]
            move = rng.choice([*legal, "undo", "t0>t0", "waste>stock"]) if rng.random() < 0.995 else "resign"
            shell.hold_persists = rng.random() < 0.3
            next_id[conn] += 1
            move_id = next_id[conn] if rng.random() < 0.9 else rng.randrange(1, next_id[conn] + 1)  # retries
            shell.send(conn, p.Move(id=move_id, move=move))
        elif roll < 0.7:
            other: list[p.ClientMessage] = [p.Ready(), p.Start(), p.Kick(player_id="x"), p.Join(code=code)]
            if step > 250:
                other.append(p.EndRace())
            shell.send(conn, rng.choice(other))
        elif roll < 0.75:
            shell.release()
        else:
            shell.advance(rng.randrange(0, 400))
        if step % 50 == 49:
            shell.hold_persists = False
            shell.release()
    shell.hold_persists = False
    shell.release()
    room = shell.core.rooms.get(code)
    assert room is not None and room.race is not None
    for pid_, racer in room.race.racers.items():
        log = shell.logs[(code, room.race.record.number, pid_)]
        replayed = Game(deal)
        for entry in log:
            replayed.play(entry.move)
        assert replayed.state_key() == racer.game.state_key()
        ids = [e.id for e in log if e.id is not None]
        assert len(ids) == len(set(ids))  # no client move applied twice
    assert sum(r.log_length for r in room.race.racers.values()) > 20  # the storm did play moves
    for conn in everyone:
        seqs = [m.seq for m in shell.inbox[conn] if isinstance(m, p.MoveOk) and not m.duplicate]
        assert seqs == sorted(seqs)


def test_a_race_starts_only_once_the_store_holds_its_record() -> None:
    """The countdown's save (the deal and salt its commitment binds) lands before any race_start
    goes out: past the countdown the room waits for RoomSaved, then starts at once."""
    shell = Shell()
    conns, code = lobby(shell)
    shell.hold_saves = True
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms + 500)
    summary = shell.core.summary(code)
    assert summary is not None and summary.phase == p.COUNTDOWN
    assert not any(isinstance(m, p.RaceStart) for conn in conns for m in shell.inbox[conn])
    shell.hold_saves = False
    shell.land_saves()
    shell.advance(0)
    summary = shell.core.summary(code)
    assert summary is not None and summary.phase == p.RACING
    assert all(any(isinstance(m, p.RaceStart) for m in shell.inbox[conn]) for conn in conns)


def test_a_live_room_never_expires_in_the_store_and_a_finished_one_does() -> None:
    """The core gives a room's stored lifetime: none while it is live here, the room lifetime once
    it shows results."""
    shell = Shell()
    conns, code = racing(shell)
    live = [e.seconds for e in shell.effects if isinstance(e, ExpireRoom) and e.code == code]
    assert live and all(seconds is None for seconds in live)
    shell.send(conns[0], p.EndRace())
    finished = [e.seconds for e in shell.effects if isinstance(e, ExpireRoom) and e.code == code][len(live) :]
    assert finished == [shell.config.room_ttl_s]


# ====================================================================== chat and finishes


def chat_lines(shell: Shell, conn: int) -> list[p.ChatLine]:
    return [m.line for m in shell.inbox[conn] if isinstance(m, p.ChatSaid)]


def spectate(shell: Shell, code: str, name: str = "Zed") -> int:
    conn = shell.hello(name)
    shell.send(conn, p.Join(code=code, role="spectator"))
    return conn


def test_a_chat_line_reaches_everyone_in_the_room_as_text_only() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    zed = spectate(shell, code)
    bob = pid(shell, conns[1])
    for conn in (*conns, zed):
        shell.take(conn)
    effects = shell.send(conns[1], p.Chat(text="  good luck all 🍀 "))
    for conn in (*conns, zed):
        got = shell.take(conn)
        # One frame, the line alone: no room snapshot, board or leaderboard rides with it.
        assert [p.message_type(m) for m in got] == ["chat"], got
        said = got[0]
        assert isinstance(said, p.ChatSaid) and said.room == code
        line = said.line
        assert (line.seq, line.name, line.role, line.audience) == (1, "Bob", "racer", "all")
        assert line.text == "good luck all 🍀"  # trimmed
        assert line.player_id == bob and line.at == shell.now and not line.claimed
    # The frame holds nothing but the line's declared text fields.
    raw = msgspec.msgpack.decode(p.encode(said))
    assert set(raw) == {"type", "room", "line"} and set(raw["line"]) == set(p.ChatLine.__struct_fields__)
    # Kept with the room in the store, for joiners.
    assert [line.text for line in shell.rooms[code].chat] == ["good luck all 🍀"]
    assert not any(isinstance(e, Send) and not isinstance(e.message, p.ChatSaid) for e in effects)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x" * (p.CHAT_MAX + 1), f"at most {p.CHAT_MAX} characters"),
        ("clear \x1b[2J screen", "control or invisible characters (found U+001B)"),
        ("hidden\u202eevil", "control or invisible characters (found U+202E)"),
        ("   ", "at least one visible character"),
    ],
)
def test_a_bad_chat_line_is_refused_with_its_reason_and_reaches_nobody(text: str, says: str) -> None:
    shell = Shell()
    conns, _code = lobby(shell)
    shell.take(conns[0])
    shell.send(conns[1], p.Chat(text=text))
    err = shell.error(conns[1])
    assert (err.code, err.ref) == (p.BAD_FIELD, "chat")
    assert "field 'text' of chat" in err.message and says in err.message
    assert chat_lines(shell, conns[0]) == []
    # A line past even the frame's bound is refused by the decoder, naming the field.
    with pytest.raises(p.ProtocolError) as refused:
        p.decode_client(msgspec.msgpack.encode({"type": "chat", "text": "y" * (p.CHAT_FRAME_MAX + 1)}))
    assert refused.value.code == p.BAD_FIELD and "'text'" in refused.value.message


def test_chat_is_rate_limited_per_member_and_recovers() -> None:
    shell = Shell()
    conns, _code = lobby(shell)
    burst, window = shell.config.chat_burst, shell.config.chat_window_ms
    for i in range(burst):
        shell.send(conns[1], p.Chat(text=f"line {i}"))
        shell.advance(100)
    shell.send(conns[1], p.Chat(text="one too many"))
    err = shell.error(conns[1])
    assert err.code == p.CHAT_LIMITED and f"at most {burst} chat lines" in err.message and "wait 10 s" in err.message
    assert shell.core.conns[conns[1]] is not None  # still connected: a chat limit never closes it
    # Another member is not limited by Bob's lines.
    shell.send(conns[2], p.Chat(text="me too"))
    assert chat_lines(shell, conns[0])[-1].text == "me too"
    shell.advance(window - burst * 100 + 1)  # the first line has left the window
    shell.send(conns[1], p.Chat(text="back"))
    assert chat_lines(shell, conns[0])[-1].text == "back"


def test_the_host_mutes_and_unmutes_a_member() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    shell.send(conns[2], p.Mute(player_id=bob))
    assert shell.error(conns[2]).code == p.NOT_HOST
    shell.send(conns[0], p.Mute(player_id=ann))
    assert shell.error(conns[0]).code == p.BAD_FIELD and "yourself" in shell.error(conns[0]).message
    shell.send(conns[0], p.Mute(player_id="p-nobody"))
    assert shell.error(conns[0]).code == p.UNKNOWN_PLAYER
    shell.send(conns[0], p.Mute(player_id=bob))
    for conn in conns:  # everyone's snapshot shows it
        assert [m.muted for m in shell.room(conn).members] == [False, True, False]
    assert shell.rooms[code].members[1].muted  # stored: it outlives a restart
    shell.take(conns[0])
    shell.send(conns[1], p.Chat(text="let me speak"))
    assert shell.error(conns[1]).code == p.MUTED
    assert chat_lines(shell, conns[0]) == []
    shell.send(conns[0], p.Mute(player_id=bob, muted=False))
    assert not shell.room(conns[2]).members[1].muted
    shell.send(conns[1], p.Chat(text="thanks"))
    assert chat_lines(shell, conns[0])[-1].text == "thanks"


def test_a_muted_spectator_is_refused_too() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    zed = spectate(shell, code)
    shell.send(zed, p.Chat(text="hi"))
    zed_id = chat_lines(shell, conns[0])[-1].player_id  # the host learns a spectator's id from its lines
    shell.send(conns[0], p.Mute(player_id=zed_id))
    assert shell.room(zed).members[-1].muted  # its own snapshot lists it, muted
    shell.send(zed, p.Chat(text="hi again"))
    assert shell.error(zed).code == p.MUTED


def test_spectators_chat_reaches_racers_only_outside_a_race_by_default() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    zed, yan = spectate(shell, code), spectate(shell, code, "Yan")
    shell.send(zed, p.Chat(text="lobby talk"))
    assert chat_lines(shell, conns[0])[-1].text == "lobby talk"
    shell.send(conns[0], p.Start())
    shell.send(zed, p.Chat(text="countdown hint"))
    shell.advance(shell.config.countdown_ms)
    assert shell.core.rooms[code].phase == p.RACING
    shell.send(zed, p.Chat(text="stock has the 8 you need"))
    for racer in conns:
        assert [line.text for line in chat_lines(shell, racer)] == ["lobby talk"]
    seen = chat_lines(shell, yan)
    assert [line.text for line in seen][-2:] == ["countdown hint", "stock has the 8 you need"]
    assert seen[-1].audience == p.TO_SPECTATORS
    assert chat_lines(shell, zed)[-1].audience == p.TO_SPECTATORS  # its sender sees where it went
    # A racer's line still reaches everyone.
    shell.send(conns[1], p.Chat(text="this deal!"))
    assert chat_lines(shell, yan)[-1].text == "this deal!" and chat_lines(shell, conns[0])[-1].text == "this deal!"
    # A racer who joins or resumes mid-race is not handed the spectators' lines in its history.
    token = shell.welcome(conns[0]).token
    shell.disconnect(conns[0])
    back = shell.hello("Ann", token=token)
    history = shell.last(back, p.ChatHistory)
    assert isinstance(history, p.ChatHistory)
    assert [line.text for line in history.lines] == ["lobby talk", "this deal!"]
    late = spectate(shell, code, "Late")
    history = shell.last(late, p.ChatHistory)
    assert isinstance(history, p.ChatHistory) and len(history.lines) == 4


def test_a_room_can_let_spectators_chat_to_racers_during_a_race() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"), spectator_chat="always")
    zed = spectate(shell, code)
    assert shell.room(zed).rules.spectator_chat == p.CHAT_ALWAYS
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    shell.send(zed, p.Chat(text="go go go"))
    line = chat_lines(shell, conns[1])[-1]
    assert line.text == "go go go" and line.audience == p.TO_ALL


def test_chat_history_keeps_the_last_lines_and_outlives_a_restart() -> None:
    shell = Shell(CoreConfig(chat_burst=100, chat_room_per_s=100))
    conns, code = lobby(shell, ("Ann", "Bob"))
    keep = shell.config.chat_history
    for i in range(keep + 7):
        shell.send(conns[i % 2], p.Chat(text=f"line {i}"))
    late = spectate(shell, code)
    history = shell.last(late, p.ChatHistory)
    assert isinstance(history, p.ChatHistory)
    assert [line.text for line in history.lines] == [f"line {i}" for i in range(7, keep + 7)]
    assert [line.seq for line in history.lines] == list(range(8, keep + 8))
    # A new process rebuilds the room from the store: the history with it, numbering on.
    token = shell.welcome(conns[1]).token
    shell.core = ServerCore(shell.config, SeededEntropy(seed=2))
    shell.conns_of.clear()
    shell.apply(shell.core.load_room(shell.rooms[code], {}, shell.now))
    back = shell.hello("Bob", token=token)
    history = shell.last(back, p.ChatHistory)
    assert isinstance(history, p.ChatHistory) and history.lines[-1].text == f"line {keep + 6}"
    shell.send(back, p.Chat(text="after the restart"))
    assert chat_lines(shell, back)[-1].seq == keep + 8


def test_chat_needs_a_room_and_a_welcome() -> None:
    shell = Shell()
    conn = shell.connect()
    shell.send(conn, p.Chat(text="hi"))
    assert shell.error(conn).code == p.WRONG_PHASE
    shell.say_hello(conn, "Ann")
    shell.send(conn, p.Chat(text="hi"))
    assert shell.error(conn).code == p.NOT_IN_ROOM and shell.error(conn).ref == "chat"


def finishes(shell: Shell, conn: int) -> list[p.Finished]:
    return [m for m in shell.inbox[conn] if isinstance(m, p.Finished)]


def test_finish_events_go_to_racers_and_spectators_once_each() -> None:
    shell = Shell()
    conns, code = racing(shell)
    zed = spectate(shell, code)
    cy = pid(shell, conns[2])
    shell.advance(1500)
    shell.move(conns[2], 1, "resign")
    shell.advance(200)  # the next leaderboard ticks
    for conn in (*conns, zed):
        got = finishes(shell, conn)
        assert len(got) == 1, got
        done = got[0]
        assert (done.player_id, done.name, done.status, done.race) == (cy, "Cy", "resigned", 1)
        assert done.place == 3 and done.elapsed_ms == 1500 and done.cards == 1  # the base card dealt home
        assert not done.final  # a resigned racer may yet be passed
    shell.advance(2000)
    assert len(finishes(shell, zed)) == 1  # never again
    # The last two games end in one event: both are announced before the results.
    shell.move(conns[1], 1, "resign")
    shell.move(conns[0], 1, "resign")
    kinds = [p.message_type(m) for m in shell.inbox[zed]]
    assert kinds.count("finished") == 3 and kinds.index("results") > max(
        i for i, kind in enumerate(kinds) if kind == "finished"
    )
    # Those of one event in rank order (equal cards and time: seat order), with their final places.
    assert [(f.name, f.place, f.final) for f in finishes(shell, zed)] == [
        ("Cy", 3, False),
        ("Ann", 1, True),
        ("Bob", 2, True),
    ]


def test_a_room_takes_a_bounded_number_of_lines_a_second_whoever_says_them() -> None:
    shell = Shell(CoreConfig(chat_room_per_s=3))
    conns, _code = lobby(shell)
    for i in range(3):
        shell.send(conns[i], p.Chat(text=f"line {i}"))
    shell.send(conns[0], p.Chat(text="one more"))
    err = shell.error(conns[0])
    assert err.code == p.CHAT_LIMITED and "the room's chat is busy" in err.message
    assert [line.text for line in chat_lines(shell, conns[1])] == ["line 0", "line 1", "line 2"]
    shell.advance(1000)
    shell.send(conns[0], p.Chat(text="one more"))  # a refused line did not count against the sender
    assert chat_lines(shell, conns[1])[-1].text == "one more"


def test_a_win_is_announced_with_its_final_place_and_time() -> None:
    from shared.solver import solve_deal

    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"), deal=DEAL)
    zed = spectate(shell, code)
    line = solve_deal(DEAL, max_positions=200_000)
    assert line.verdict == "winnable"
    shell.advance(459_000)  # 7:39 into the race, Bob plays his whole winning line
    for move_id, move in enumerate(line.moves, start=1):
        ok = shell.move(conns[1], move_id, move)
        assert isinstance(ok, p.MoveOk), ok
    shell.advance(200)
    (won,) = finishes(shell, zed)
    assert (won.name, won.status, won.place, won.cards, won.final) == ("Bob", "won", 1, 104, True)
    assert won.elapsed_ms == 459_000
    assert finishes(shell, conns[0]) == [won]  # the racer still playing is told too
