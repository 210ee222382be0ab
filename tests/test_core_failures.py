"""The room core's failure paths: a handler that raises, writes whose outcome is
unknown, rooms that must stay closed or count toward the limit, players that must be forgotten,
and the move-id rules of docs/protocol.md.

Core-level tests drive the package's test shell (server.testing.shell.Shell); the room-lifecycle
ones run the real server on a loopback port with real WebSocket clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from support import (
    Client,
    SeededEntropy,
    Shell,
    eventually,
    fast_config,
    lobby,
    make_room,
    phase_of,
    pid,
    racing,
    record_of,
    running_server,
    toggling_moves,
)

from server.core import CoreConfig, ServerCore
from server.core.deadlines import Due
from server.core.events import (
    ClientEvent,
    DropRoom,
    KeepCommand,
    LoadRoom,
    LogReloaded,
    MovePersistFailed,
    Note,
    PersistMove,
    RegisterPlayer,
    RemoteBatch,
    RemoteMoves,
    Reply,
    RoomChanged,
    RoomStale,
    SavePlayer,
    Send,
    Wake,
    WakeLeaderboards,
)
from server.core.race import PHASE_TRANSITIONS
from server.core.records import LogEntry
from server.core.state import LOG_TRANSITIONS, LogState
from server.store.base import Store
from server.store.memory import MemoryStore
from shared import protocol as p
from shared.engine import Game


def notes(shell: Shell, event: str, start: int = 0) -> list[Note]:
    return [e for e in shell.effects[start:] if isinstance(e, Note) and e.event == event]


def replies(shell: Shell, conn: int) -> dict[int, p.MoveOk | p.MoveRejected]:
    return {m.id: m for m in shell.inbox[conn] if isinstance(m, p.MoveOk | p.MoveRejected)}


# ====================================================================== a handler that raises


def test_a_handler_that_raises_drops_the_room_and_rebuilds_it_from_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    shell.move(conns[0], 1, "stock>waste")
    # Fault injection: the next acknowledgement's board change fails, after the move's write
    # landed and the racer's game took it (the half-changed state a racer must never be left
    # in: in flight forever).
    # (Patched where the core calls the engine: inside a compiled engine, its own calls are C calls.)
    real_play = Game.play_answered
    calls = {"n": 0}

    def failing_play(game: Game, *args: Any) -> Any:
        calls["n"] += 1
        answer = real_play(game, *args)
        if calls["n"] == 1:
            raise RuntimeError("injected failure")
        return answer

    monkeypatch.setattr(Game, "play_answered", failing_play)
    start = len(shell.effects)
    shell.take(conns[0])
    shell.move(conns[0], 2, "stock>waste")  # must not raise out of the core
    failures = notes(shell, "core_failed", start)
    assert len(failures) == 1, "the failure is logged once"
    assert failures[0].level == "error" and "injected failure" in str(failures[0].fields["error"])
    effects = shell.effects[start:]
    assert any(isinstance(e, DropRoom) and e.code == code for e in effects)
    assert any(isinstance(e, LoadRoom) and e.code == code for e in effects)
    # Rebuilt from the store: both entries are in the log and in the rebuilt racer's game.
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    assert [e.id for e in shell.logs[(code, 1, ann)]] == [1, 2] and racer.log_length == 2
    # The racers are resynchronised: a fresh board (race_start with the log's seq), and the move
    # in flight is answered from the log.
    got = shell.take(conns[0])
    starts = [m for m in got if isinstance(m, p.RaceStart)]
    assert starts and starts[-1].seq == 2
    assert any(isinstance(m, p.MoveOk) and m.id == 2 for m in got)
    assert any(isinstance(m, p.RaceStart) for m in shell.take(conns[1]))
    # Nothing is stuck: more moves play, and the race still ends.
    ok = shell.move(conns[0], 3, "stock>waste")
    assert isinstance(ok, p.MoveOk) and ok.seq == 3
    shell.move(conns[0], 4, "resign")
    shell.move(conns[1], 1, "resign")
    results = shell.last(conns[0], p.Results)
    assert isinstance(results, p.Results) and set(results.ranking) == {ann, bob}


def test_a_client_message_that_makes_a_handler_raise_is_answered_internal(monkeypatch: pytest.MonkeyPatch) -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))

    def boom(*_args: object) -> None:
        raise ValueError("ready broke")

    monkeypatch.setattr(type(shell.core), "_ready", boom)
    shell.take(conns[1])
    shell.send(conns[1], p.Ready(ready=False))
    got = shell.take(conns[1])
    (err,) = [m for m in got if isinstance(m, p.Error)]
    assert err.code == p.INTERNAL and err.ref == "ready"
    assert isinstance(got[-1], p.Room), "resynchronised with the rebuilt room"
    monkeypatch.undo()
    assert shell.core.has_room(code)  # rebuilt at once from the store
    shell.send(conns[1], p.Ready(ready=False))
    assert not next(m for m in shell.room(conns[1]).members if m.name == "Bob").ready


# ====================================================================== the racer's write-ahead log


def test_moves_queued_behind_an_uncertain_write_wait_for_its_verdict() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    for move_id in (1, 2, 3):
        shell.send(conns[0], p.Move(id=move_id, move="stock>waste"))
    (first,) = shell.held  # one write per racer in flight; 2 and 3 wait in its queue
    shell.held.clear()
    # The store stopped answering mid-write; the re-read log shows the entry did not land.
    shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
    assert shell.held == []
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    assert shell.held == [], "nothing queued behind the move in doubt is written before it"
    shell.hold_persists = False
    shell.advance(shell.config.store_outage_ms // 2)  # the retry comes after a back-off
    assert [e.id for e in shell.logs[(code, 1, ann)]] == [1, 2, 3], "moves land in the order sent"
    got = replies(shell, conns[0])
    assert all(isinstance(got[i], p.MoveOk) for i in (1, 2, 3))
    assert first.entry.id == 1


def test_a_move_in_doubt_gets_a_definite_answer_within_the_outage_limit() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    shell.send(conns[0], p.Move(id=2, move="stock>waste"))
    (held,) = shell.held
    shell.held.clear()
    shell.logs[(code, 1, ann)].append(held.entry)  # it did land; the answer was lost
    shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
    # The store stays down: the log cannot be read. Within the outage limit, a definite answer.
    shell.advance(shell.config.store_outage_ms)
    got = replies(shell, conns[0])
    first, second = got.get(1), got.get(2)
    assert isinstance(first, p.MoveRejected) and first.code == p.STORE_UNAVAILABLE and "may or may not" in first.reason
    assert isinstance(second, p.MoveRejected) and second.code == p.STORE_UNAVAILABLE
    shell.send(conns[0], p.Move(id=3, move="stock>waste"))
    assert isinstance(replies(shell, conns[0]).get(3), p.MoveRejected), "answered at once during the outage"
    shell.take(conns[0])
    # The store is back: the log is read, the racer gets its board as the log has it.
    shell.hold_persists = False
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    resync = shell.last(conns[0], p.RaceStart)
    assert isinstance(resync, p.RaceStart) and resync.seq == 1
    dup = shell.move(conns[0], 1, "stock>waste")  # resent with the same id: applied once only
    assert isinstance(dup, p.MoveOk) and dup.duplicate and dup.seq == 1
    ok = shell.move(conns[0], 2, "stock>waste")
    assert isinstance(ok, p.MoveOk) and ok.seq == 2


def test_the_move_in_doubt_resent_during_and_after_an_outage_is_answered_each_time() -> None:
    """The outage's head, answered store_unavailable, resent with the same id: answered again at
    once while the log cannot be read; and once it is read without the entry, the id is free: the
    resend is played (a move the log holds would be answered duplicate, above)."""
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    shell.held.clear()  # it did not land
    shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
    shell.advance(shell.config.store_outage_ms)
    first = replies(shell, conns[0]).get(1)
    assert isinstance(first, p.MoveRejected) and first.code == p.STORE_UNAVAILABLE
    shell.take(conns[0])
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    again = replies(shell, conns[0]).get(1)
    assert isinstance(again, p.MoveRejected) and again.code == p.STORE_UNAVAILABLE, "answered at once"
    shell.take(conns[0])
    shell.hold_persists = False
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    resync = shell.last(conns[0], p.RaceStart)
    assert isinstance(resync, p.RaceStart) and resync.seq == 0
    ok = shell.move(conns[0], 1, "stock>waste")
    assert isinstance(ok, p.MoveOk) and not ok.duplicate and ok.seq == 1


def test_retries_back_off() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    gaps = []
    last = shell.now
    for _ in range(4):
        shell.held.clear()
        shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
        shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
        while not shell.held:
            shell.advance(10)
        gaps.append(shell.now - last)
        last = shell.now
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0], gaps


def test_a_race_gone_from_the_store_is_not_retried_and_the_room_closes() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    shell.held.clear()
    del shell.rooms[code]  # expired or deleted under us
    start = len(shell.effects)
    shell.run(MovePersistFailed(code, 1, ann, "gone", shell.now))
    assert not any(isinstance(e, PersistMove) for e in shell.effects[start:])
    assert not shell.core.has_room(code)
    kicked = shell.last(conns[1], p.Kicked)
    assert isinstance(kicked, p.Kicked) and kicked.room == code


def test_a_move_past_the_racer_s_queue_bound_is_answered_busy_and_the_queue_is_untouched() -> None:
    """Bounded queues: a client far ahead of its answers (the store slow) fills its
    queue; each move past CoreConfig.max_queued_moves (32 by default) is answered busy at once
    with a retry hint, and the moves queued before it are written and acknowledged in order."""
    shell = Shell()
    bound = shell.config.max_queued_moves
    assert bound == 32
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.take(conns[0])
    shell.hold_persists = True
    sent = bound + 8
    for move_id in range(1, sent + 1):
        shell.send(conns[0], p.Move(id=move_id, move="stock>waste"))
    (head,) = shell.held  # one write in flight, the head; 32 wait behind it
    assert head.entry.id == 1
    got = replies(shell, conns[0])
    refused = list(range(bound + 2, sent + 1))
    assert sorted(got) == refused, "only the moves past the bound are answered, at once"
    for move_id in refused:
        answer = got[move_id]
        assert isinstance(answer, p.MoveRejected) and answer.code == p.BUSY, answer
        assert answer.reason.endswith(f"retry_ms={shell.config.queue_retry_ms}"), answer.reason
    shell.send(conns[0], p.Move(id=5, move="stock>waste"))  # a queued id sent again: still its one answer
    shell.send(conns[0], p.Move(id=6, move="waste>f0"))  # ... another text under it: refused, not queued
    sixth = replies(shell, conns[0]).get(6)
    assert isinstance(sixth, p.MoveRejected) and sixth.code == p.BAD_FIELD
    shell.take(conns[0])
    shell.hold_persists = False
    shell.release()
    assert [e.id for e in shell.logs[(code, 1, ann)]] == list(range(1, bound + 2)), "the queue, whole and in order"
    oks = [m for m in shell.take(conns[0]) if isinstance(m, p.MoveOk | p.MoveRejected)]
    assert [(type(m), m.id) for m in oks] == [(p.MoveOk, i) for i in range(1, bound + 2)]
    assert [m.seq for m in oks if isinstance(m, p.MoveOk)] == list(range(1, bound + 2))
    for move_id in refused:  # resent after the hint, same ids: played
        ok = shell.move(conns[0], move_id, "stock>waste")
        assert isinstance(ok, p.MoveOk) and not ok.duplicate and ok.seq == move_id
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    assert racer.log_length == sent and not racer.queue and not racer.pending_ids


def test_a_move_the_shell_reports_the_append_pipeline_backed_up_for_is_answered_busy_by_the_core() -> None:
    """The one busy rule: the shell reports its append pipeline's condition with the move
    (ClientEvent.load) and the core answers it busy, before any check and with nothing changed.
    The answer's retry hint is spread over half to one and a half times busy_retry_ms, and its
    frame, encoded once, is the message's own encoding with this move's id."""
    shell = Shell(CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000, busy_retry_ms=200))
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.take(conns[0])
    hints = set()
    for move_id, load in enumerate(["store", "loop"] * 40, start=1):
        effects = shell.run(ClientEvent(conns[0], p.Move(id=move_id, move="stock>waste"), shell.now, load))
        (reply,) = effects
        assert isinstance(reply, Reply) and isinstance(reply.message, p.MoveRejected), effects
        answer = reply.message
        assert answer.id == move_id and answer.code == p.BUSY, answer
        assert ("writing moves" if load == "store" else "taking on moves") in answer.reason, answer.reason
        assert reply.frame == p.encode(answer), "the frame is the answer, encoded"
        hint = int(answer.reason.rsplit("retry_ms=", 1)[1])
        assert 100 <= hint <= 300, hint
        hints.add(hint)
    assert len(hints) > 4, f"the hints are spread, not one value: {hints}"
    for big_id in (2**31, 2**40, -1):  # the id's encoding takes more bytes: the frame still holds it
        (reply,) = shell.run(ClientEvent(conns[0], p.Move(id=big_id, move="stock>waste"), shell.now, "store"))
        assert isinstance(reply, Reply) and reply.frame == p.encode(reply.message)
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    assert racer.log_length == 0 and not racer.queue and not racer.pending_ids, "nothing reached the racer"
    ok = shell.move(conns[0], 1, "stock>waste")  # resent with no load: played
    assert isinstance(ok, p.MoveOk) and ok.seq == 1


def test_the_queue_bound_counts_what_waits_whatever_holds_the_head_and_zero_turns_it_off() -> None:
    shell = Shell(CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000, max_queued_moves=2))
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    for move_id in (1, 2, 3, 4):
        shell.send(conns[0], p.Move(id=move_id, move="stock>waste"))
    busy = replies(shell, conns[0])
    assert list(busy) == [4] and busy[4].code == p.BUSY  # type: ignore[union-attr]
    # The head's write fails and its log is being re-read: the queue still holds 2, still bounded.
    shell.held.clear()
    shell.run(MovePersistFailed(code, 1, ann, "uncertain", shell.now))
    shell.send(conns[0], p.Move(id=5, move="stock>waste"))
    fifth = replies(shell, conns[0]).get(5)
    assert isinstance(fifth, p.MoveRejected) and fifth.code == p.BUSY
    shell.hold_persists = False
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    shell.advance(shell.config.retry_max_ms)  # the head is written again after its back-off
    assert [e.id for e in shell.logs[(code, 1, ann)]] == [1, 2, 3]
    # 0: no bound.
    shell = Shell(CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000, max_queued_moves=0))
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    for move_id in range(1, 61):
        shell.send(conns[0], p.Move(id=move_id, move="stock>waste"))
    assert not replies(shell, conns[0])
    shell.hold_persists = False
    shell.release()
    assert len(shell.logs[(code, 1, ann)]) == 60


# ====================================================================== rooms and players


def test_players_without_a_connection_or_a_room_are_forgotten() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    bob = pid(shell, conns[1])
    shell.disconnect(conns[1])
    assert bob in shell.core.players  # still a member, within its grace period
    shell.advance(shell.config.member_grace_ms)
    assert bob not in {m.player_id for m in record_of(shell.core, code).members}
    assert bob not in shell.core.players
    alone = shell.hello("Cy")
    cy = pid(shell, alone)
    shell.disconnect(alone)
    assert cy not in shell.core.players


def test_a_hello_alone_gets_a_short_store_lifetime_until_it_joins_a_room() -> None:
    shell = Shell()
    conn = shell.hello("Ann")
    (register,) = [e for e in shell.effects if isinstance(e, RegisterPlayer)]
    assert register.ttl_s == shell.config.new_player_ttl_s < 24 * 3600
    start = len(shell.effects)
    shell.send(conn, p.CreateRoom())
    saves = [e for e in shell.effects[start:] if isinstance(e, SavePlayer)]
    assert saves and saves[-1].record.room is not None and saves[-1].ttl_s is None


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        made: Store = MemoryStore()
    else:
        from server.store.redis import RedisStore

        made = RedisStore(request.getfixturevalue("redis_url"), namespace="ttl")
    yield made
    await made.close()


async def test_put_player_takes_a_lifetime(store: Store) -> None:
    await store.put_player("pshort", "a" * 64, b"short", ttl_s=0.2)
    await store.put_player("plong", "b" * 64, b"long")
    assert await store.player_by_token("a" * 64) == "pshort"

    async def gone() -> bool:
        return await store.get_player("pshort") is None and await store.player_by_token("a" * 64) is None

    await eventually(gone, timeout=5.0)
    assert await store.get_player("plong") == b"long"


async def test_a_closed_room_stays_closed() -> None:
    async with running_server() as server:
        (ann,), code = await make_room(server, ["Ann"])
        await ann.send(p.Leave())
        await ann.expect(p.Left)
        bob = await Client.open(server, "Bob")
        await bob.hello("Bob")
        await bob.send(p.Join(code=code))
        err = await bob.expect(p.Error)
        assert err.code == p.UNKNOWN_ROOM, err
        assert not any(isinstance(m, p.Room) for m in bob.messages)
        await ann.close()
        await bob.close()


async def test_a_room_loaded_from_the_store_counts_toward_the_room_limit() -> None:
    store = MemoryStore()
    async with running_server(store) as first:
        (ann,), code = await make_room(first, ["Ann"])
        limited = fast_config(core=CoreConfig(countdown_ms=100, max_rooms=1))
        async with running_server(store, limited) as second:
            (cy,), _own = await make_room(second, ["Cy"])
            bob = await Client.open(second, "Bob")
            await bob.hello("Bob")
            await bob.send(p.Join(code=code))
            err = await bob.expect(p.Error)
            assert err.code == p.SERVER_FULL, err
            await eventually(lambda: second.core.room_count() == 1)
            for client in (ann, cy, bob):
                await client.close()


# ====================================================================== protocol: move ids and codes


def test_an_error_about_a_move_carries_its_id() -> None:
    shell = Shell()
    conn = shell.connect()
    shell.send(conn, p.Move(id=77, move="stock>waste"))
    err = shell.error(conn)
    assert err.code == p.WRONG_PHASE and err.ref == "move" and err.id == 77


def test_move_codes_for_spectators_finished_games_and_finished_races() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    watcher = shell.hello("Sue")
    shell.send(watcher, p.Join(code=code, role=p.SPECTATOR))
    rejected = shell.move(watcher, 1, "stock>waste")
    assert isinstance(rejected, p.MoveRejected) and rejected.code == p.WRONG_PHASE
    shell.move(conns[0], 1, "resign")
    after_own = shell.move(conns[0], 2, "stock>waste")
    assert isinstance(after_own, p.MoveRejected) and after_own.code == p.WRONG_PHASE
    assert "your game is over" in after_own.reason
    shell.move(conns[1], 1, "resign")
    after_race = shell.move(conns[1], 2, "stock>waste")
    assert isinstance(after_race, p.MoveRejected) and after_race.code == p.WRONG_PHASE
    assert "race is over" in after_race.reason


def test_move_id_rules() -> None:
    shell = Shell()
    conns, _code = racing(shell, ("Ann", "Bob"))
    # A rejected id may be used again: nothing was applied under it.
    refused = shell.move(conns[0], 5, "t1>t1")
    assert isinstance(refused, p.MoveRejected) and refused.code == p.ILLEGAL_MOVE
    ok = shell.move(conns[0], 5, "stock>waste")
    assert isinstance(ok, p.MoveOk) and ok.seq == 1
    # Ids need not increase.
    ok = shell.move(conns[0], 2, "stock>waste")
    assert isinstance(ok, p.MoveOk) and ok.seq == 2
    # The same applied id again with the same text: a duplicate, answered from the log.
    dup = shell.move(conns[0], 5, "stock>waste")
    assert isinstance(dup, p.MoveOk) and dup.duplicate
    # ... with another text: refused, never reported as a success.
    other = shell.move(conns[0], 5, "resign")
    assert isinstance(other, p.MoveRejected) and other.code == p.BAD_FIELD and other.id == 5
    assert shell.core.rooms[_code].race.racers[pid(shell, conns[0])].game.status == "playing"  # type: ignore[union-attr]


# ====================================================================== the transition tables


def test_the_transition_tables_refuse_what_they_do_not_list() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    room = shell.core.rooms[code]
    racer = room.race.racers[pid(shell, conns[0])]  # type: ignore[union-attr]
    assert racer.state is LogState.IDLE
    with pytest.raises(RuntimeError, match="idle -> outage"):
        racer.move_to(LogState.OUTAGE)
    with pytest.raises(RuntimeError, match="racing -> lobby"):
        shell.core._set_phase(room, p.LOBBY)
    assert PHASE_TRANSITIONS[p.RACING] == {p.RESULTS}
    # Every state and phase is in its table, and every target is a known one.
    assert set(LOG_TRANSITIONS) == set(LogState)
    assert all(targets <= set(LogState) for targets in LOG_TRANSITIONS.values())
    assert all(targets <= set(PHASE_TRANSITIONS) for targets in PHASE_TRANSITIONS.values())


def test_the_deadline_table_feeds_both_the_tick_and_the_wake() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    room = shell.core.rooms[code]
    shell.disconnect(conns[1])
    table = shell.core._deadlines(room)
    assert shell.wakes[code] == min(d.at for d in table)
    forfeit = next(d for d in table if d.due is Due.FORFEIT)
    shell.advance(forfeit.at - shell.now)
    bob = pid(shell, conns[1])
    assert shell.logs[(code, 1, bob)][-1].move == "resign"
    assert not any(d.due is Due.FORFEIT for d in shell.core._deadlines(room))


def test_a_race_gone_from_the_store_while_the_room_is_there_rebuilds_it_from_the_store() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    shell.held.clear()
    shell.run(MovePersistFailed(code, 1, ann, "gone", shell.now))
    assert shell.core.has_room(code), "rebuilt from the stored record"
    (reread,) = [r for r in shell.reloads if r.player_id == ann]
    shell.hold_persists = False
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    shell.advance(shell.config.store_outage_ms // 2)
    ok = replies(shell, conns[0])[1]
    assert isinstance(ok, p.MoveOk) and ok.seq == 1 and reread.code == code


def test_a_move_whose_handler_raises_is_answered_internal_with_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))

    def boom(*_args: object) -> bool:
        raise ValueError("check broke")

    monkeypatch.setattr(type(shell.core), "_check_head", boom)
    shell.take(conns[0])
    shell.send(conns[0], p.Move(id=9, move="stock>waste"))
    (err,) = [m for m in shell.take(conns[0]) if isinstance(m, p.Error)]
    assert err.code == p.INTERNAL and err.ref == "move" and err.id == 9
    monkeypatch.undo()
    ok = shell.move(conns[0], 9, "stock>waste")  # nothing happened under id 9: it plays now
    assert isinstance(ok, p.MoveOk) and ok.seq == 1 and shell.core.has_room(code)


# ====================================================================== store reads are effects


def test_a_resume_loads_its_room_from_the_store_through_an_effect() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    token = shell.welcome(conns[0]).token
    shell.move(conns[0], 1, "stock>waste")
    shell.core = ServerCore(shell.config, SeededEntropy(seed=2))  # a restart: same store, empty memory
    shell.conns_of.clear()
    start = len(shell.effects)
    conn = shell.hello("Ann", token=token)
    assert [e.code for e in shell.effects[start:] if isinstance(e, LoadRoom)] == [code]
    welcome = shell.welcome(conn)
    assert welcome.resumed and welcome.room == code
    start_msg = shell.last(conn, p.RaceStart)
    assert isinstance(start_msg, p.RaceStart) and start_msg.seq == 1


def test_store_reads_that_fail_are_answered_store_unavailable() -> None:
    shell = Shell()
    conns, _code = lobby(shell, ("Ann",))
    token = shell.welcome(conns[0]).token
    shell.store_down = True
    shell.send(conns[0], p.ListRooms())
    assert shell.error(conns[0]).code == p.STORE_UNAVAILABLE
    again = shell.hello("Ann", token=token)
    assert shell.error(again).code == p.STORE_UNAVAILABLE and shell.core.conns[again] is None
    other = shell.hello("Bob")
    shell.send(other, p.Join(code="ZZZZZ"))
    assert shell.error(other).code == p.STORE_UNAVAILABLE
    shell.store_down = False
    shell.send(other, p.Join(code="ZZZZZ"))
    assert shell.error(other).code == p.UNKNOWN_ROOM
    shell.send(other, p.ListRooms())
    listing = shell.inbox[other][-1]
    assert isinstance(listing, p.RoomList) and [r.host_name for r in listing.rooms] == ["Ann"]


# ====================================================================== several nodes: a room read back


def shared_shell() -> Shell:
    return Shell(CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000, shared_rooms=True, node_id="a"))


def results_of(shell: Shell, conn: int) -> list[p.Results]:
    return [m for m in shell.inbox[conn] if isinstance(m, p.Results)]


def test_results_go_out_only_once_the_save_that_ends_the_race_has_landed() -> None:
    """Every accepted change is persisted before it is announced: the race's results wait for the
    save that ends the race (SaveRoom.then), and go out with it once it lands, to every member."""
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    shell.hold_saves = True
    start = len(shell.effects)
    for n, conn in enumerate(conns):
        shell.move(conn, 100 + n, "resign")
    assert phase_of(shell.core, code) == p.RESULTS
    sent = [e for e in shell.effects[start:] if isinstance(e, Send) and isinstance(e.message, p.Results)]
    assert sent == [] and all(results_of(shell, c) == [] for c in conns)
    [save] = [s for s in shell.held_saves if s.record.phase == p.RESULTS]
    assert [type(e.message) for e in save.then] == [p.Results]
    assert shell.rooms[code].phase == p.RACING  # not stored yet
    shell.land_saves()
    assert shell.rooms[code].phase == p.RESULTS
    got = [results_of(shell, c) for c in conns]
    assert all(len(r) == 1 for r in got) and got[0] == got[1]
    assert {row.player_id: row.status for row in got[0][0].racers} == {pid(shell, c): "resigned" for c in conns}


def test_a_node_whose_results_save_loses_sends_the_stored_results_not_its_own() -> None:
    """Several nodes: this node ends the race, but another node's save of the race's end lands first,
    from a copy that differs (Bob resumed there; this node still has him away). This node's save
    loses the compare-and-set and is dropped with its results; its members get the results the
    read-back finds in the store, once."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    shell.disconnect(conns[1])  # away here, within his grace
    shell.hold_saves = True
    shell.send(conns[0], p.EndRace())
    [own] = [s for s in shell.held_saves if s.record.phase == p.RESULTS]
    [own_results] = [e.message for e in own.then if isinstance(e.message, p.Results)]
    assert isinstance(own_results, p.Results) and results_of(shell, conns[0]) == []
    assert not next(r for r in own_results.racers if r.player_id == bob).connected
    # The other node's end of the race is the one stored: Bob connected there.
    members = [
        msgspec.structs.replace(m, left_ms=None, node="b", claim=m.claim + 1) if m.player_id == bob else m
        for m in own.record.members
    ]
    stored = msgspec.structs.replace(own.record, members=members, version=own.record.version + 5)
    shell.rooms[code] = stored
    shell.held_saves.clear()  # this node's save lost the compare-and-set: the shell drops it
    race = stored.race
    assert race is not None
    logs = {r.player_id: list(shell.logs[(code, race.number, r.player_id)]) for r in race.racers}
    shell.run(RoomChanged(code, stored, logs, shell.now))
    [results] = results_of(shell, conns[0])
    assert results != own_results
    assert next(r for r in results.racers if r.player_id == bob).connected
    assert next(r for r in results.racers if r.player_id == ann).connected
    assert phase_of(shell.core, code) == p.RESULTS


def test_on_several_nodes_a_room_change_is_shown_once_its_save_has_landed_never_rolled_back() -> None:
    """Several nodes: Cy's "not ready" is shown to no one until its save lands. Here it loses the
    compare-and-set to another node's change (Dan joined there): the read-back shows Dan joined
    with Cy still ready, then the replayed "not ready", once its save lands. Shown at once, as on
    one node, everyone saw Cy not ready, then ready again, then not ready (a flicker)."""
    shell = shared_shell()
    conns, code = lobby(shell, ("Ann", "Bob", "Cy"))
    bob, cy = pid(shell, conns[1]), pid(shell, conns[2])
    seen = len(shell.inbox[conns[1]])
    shell.hold_saves = True
    shell.send(conns[2], p.Ready(ready=False))
    assert not any(isinstance(m, p.Room) for m in shell.inbox[conns[1]][seen:])  # not yet stored
    [own] = shell.held_saves
    assert not next(m for m in own.record.members if m.player_id == cy).ready
    # Another node's save landed first: Dan joined there (Cy still ready in its copy).
    stored_before = shell.rooms[code]
    dan = msgspec.structs.replace(
        next(m for m in stored_before.members if m.player_id == bob), player_id="dan00000", name="Dan", node="b"
    )
    stored = msgspec.structs.replace(
        stored_before, members=[*stored_before.members, dan], version=stored_before.version + 1
    )
    shell.rooms[code] = stored
    shell.held_saves.clear()  # this node's save lost the compare-and-set: the shell drops it
    shell.run(
        RoomChanged(code, stored, {}, shell.now, replay=(ClientEvent(conns[2], p.Ready(ready=False), shell.now),))
    )
    shell.land_saves()
    rooms = [m for m in shell.inbox[conns[1]][seen:] if isinstance(m, p.Room)]
    cy_ready = [next(x.ready for x in room.members if x.player_id == cy) for room in rooms]
    assert "Dan" in {x.name for x in rooms[-1].members}
    assert cy_ready[-1] is False and cy_ready == sorted(cy_ready, reverse=True), cy_ready  # never back to ready
    assert (
        shell.rooms[code].version > stored.version
        and not next(m for m in shell.rooms[code].members if m.player_id == cy).ready
    )


def test_a_race_start_whose_save_lost_comes_from_the_read_back_and_a_later_one_resends_nothing() -> None:
    """Several nodes: both nodes start the race when the countdown ends; this node's save of the
    start loses to the other's, so its race_start (waiting for that save) is dropped. The read-back
    finds the race on, a phase its members were never shown: each racer gets its race_start from
    it. A later read-back that changes neither the phase nor the race (a spectator joined on the
    other node) sends the room only: no board, no leaderboard again."""
    shell = shared_shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    shell.send(conns[0], p.Start())
    shell.hold_saves = True
    shell.advance(shell.config.countdown_ms)
    assert phase_of(shell.core, code) == p.RACING
    assert not any(isinstance(m, p.RaceStart) for c in conns for m in shell.inbox[c])  # waiting for the save
    [own] = [s for s in shell.held_saves if s.record.phase == p.RACING]
    stored = msgspec.structs.replace(own.record, version=own.record.version + 1)  # the other node's start
    shell.rooms[code] = stored
    shell.held_saves.clear()  # this node's save lost the compare-and-set: the shell drops it
    shell.hold_saves = False
    race = stored.race
    assert race is not None
    shell.run(RoomChanged(code, stored, {r.player_id: [] for r in race.racers}, shell.now))
    for conn in conns:
        starts = [m for m in shell.inbox[conn] if isinstance(m, p.RaceStart)]
        assert len(starts) == 1 and starts[0].view is not None, starts
    # The other node counts a spectator: the phase and race as shown, nothing but the room again.
    seen = {conn: len(shell.inbox[conn]) for conn in conns}
    again = msgspec.structs.replace(stored, version=stored.version + 1)
    shell.rooms[code] = again
    shell.run(RoomChanged(code, again, {r.player_id: [] for r in race.racers}, shell.now))
    for conn in conns:
        fresh = shell.inbox[conn][seen[conn] :]
        assert [type(m) for m in fresh] == [p.Room], fresh


def test_a_room_read_back_while_its_own_racer_s_move_lands_keeps_that_move() -> None:
    """Several nodes: the shell reads a room back (record, then each racer's log, with awaits
    between) while this node stores and acknowledges its own racer's move. The logs it hands the
    core (RoomChanged) are older than what the node already acknowledged: the racer must keep the
    move, its board must stay the acknowledged one, and its next move must be judged (and written)
    after it. (Once seen as test_a_race_spread_over_two_nodes rejecting a legal move.)"""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    # The read-back starts: the record and the logs as the store has them now (no moves yet).
    record = shell.rooms[code]
    logs = {racer: list(shell.logs[(code, number, racer)]) for racer in (ann, bob)}
    # Meanwhile Ann's move is stored and acknowledged on this node.
    first = room.race.racers[ann].game.legal_moves()[0]
    assert isinstance(shell.move(conns[0], 1, first), p.MoveOk)
    acknowledged = shell.boards[conns[0]].view
    # The read-back reaches the core with the older logs.
    shell.run(RoomChanged(code, record, logs, shell.now))
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    stored = [entry.move for entry in shell.logs[(code, number, ann)]]
    assert racer.game.entries == stored == [first]
    assert racer.log_length == 1 and racer.ids == {1: 1}
    assert shell.boards[conns[0]].view == acknowledged  # the resent board is the acknowledged one
    # A move legal on the acknowledged board is played after the first, in the log's next slot.
    second = racer.game.legal_moves()[0]
    reply = shell.move(conns[0], 2, second)
    assert isinstance(reply, p.MoveOk) and reply.seq == 2, reply
    assert [entry.move for entry in shell.logs[(code, number, ann)]] == [first, second]
    assert not notes(shell, "persist_failed")


def test_a_room_read_back_while_its_own_racer_s_move_is_written_and_another_queued() -> None:
    """The read-back (older logs) reaches the core while this node's racer has one move being written
    and one queued behind it, and another racer's move landed after the read: every move is
    acknowledged once, in order, in the log's next slots, and the rebuilt games are the stored logs."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    game = room.race.racers[ann].game.copy()
    first = game.legal_moves()[0]
    game.play(first)
    second = game.legal_moves()[0]
    record = shell.rooms[code]
    logs = {racer: list(shell.logs[(code, number, racer)]) for racer in (ann, bob)}
    bobs = room.race.racers[bob].game.legal_moves()[0]
    assert isinstance(shell.move(conns[1], 1, bobs), p.MoveOk)
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move=first))
    shell.send(conns[0], p.Move(id=2, move=second))
    assert [e.entry.move for e in shell.held] == [first]
    shell.run(RoomChanged(code, record, logs, shell.now))
    shell.hold_persists = False
    shell.release()
    acks = replies(shell, conns[0])
    assert all(isinstance(acks[i], p.MoveOk) for i in (1, 2)), acks
    assert [acks[1].seq, acks[2].seq] == [1, 2]  # type: ignore[union-attr]
    race = shell.core.rooms[code].race
    assert race is not None
    for racer, moves in ((ann, [first, second]), (bob, [bobs])):
        assert [entry.move for entry in shell.logs[(code, number, racer)]] == moves
        assert race.racers[racer].game.entries == moves and race.racers[racer].log_length == len(moves)
    assert not notes(shell, "persist_failed") and not notes(shell, "persist_mismatch")


def test_a_seat_moving_here_gets_its_board_from_the_log_not_from_a_lagging_copy() -> None:
    """Several nodes: Ann raced on node B, which stored her entries; this node's copy has not heard
    of the last ones yet (their pub/sub messages are on their way). She resumes here: her board is
    sent once her log is re-read (never from the lagging copy), holds every stored entry, and her
    next move is judged and written after them. Entries arriving late over pub/sub change nothing."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    token = shell.welcome(conns[0]).token
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    room.members[ann].node = "b"  # her seat is on node B (as a read-back of the room would say)
    shell.disconnect(conns[0])
    # Node B stores three of her moves; this node hears of the first only.
    game = room.race.racers[ann].game.copy()
    stored: list[LogEntry] = []
    for index in range(3):
        move = game.legal_moves()[0]
        game.play(move)
        stored.append(LogEntry(move=move, t_ms=10 * index, id=index + 1))
    shell.logs[(code, number, ann)].extend(stored)
    shell.run(RemoteMoves(code, number, ann, 0, stored[:1], shell.now))
    assert room.race.racers[ann].log_length == 1
    again = shell.hello("Ann", token=token)
    assert shell.welcome(again).resumed
    assert not [m for m in shell.inbox[again] if isinstance(m, p.RaceStart)]  # not from the copy
    assert [(r.code, r.player_id) for r in shell.reloads] == [(code, ann)]
    shell.run(LogReloaded(code, number, ann, list(shell.logs[(code, number, ann)]), shell.now))
    boards = [m for m in shell.inbox[again] if isinstance(m, p.RaceStart)]
    assert len(boards) == 1, boards  # one board, the log's: none from the copy before the read
    assert boards[0].seq == 3 and boards[0].view == game.view() and boards[0].check == game.check
    shell.run(RemoteMoves(code, number, ann, 1, stored[1:], shell.now))  # late: known already
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    assert racer.game.entries == [e.move for e in stored] and racer.log_length == 3
    reply = shell.move(again, 4, game.legal_moves()[0])
    assert isinstance(reply, p.MoveOk) and reply.seq == 4, reply
    assert len(shell.logs[(code, number, ann)]) == 4 and not notes(shell, "persist_failed")


def test_another_node_s_entries_play_in_batches_and_a_gap_rereads_the_log() -> None:
    """Several nodes: a racer served by node B. Several of its entries in one RemoteMoves (one
    subscription batch) are all played; entries known already are skipped; a batch starting
    past the copy's end (a lost pub/sub message) re-reads the log, and the copy then holds
    every stored entry, judged by the store's log, not by what pub/sub delivered."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    game = room.race.racers[ann].game.copy()
    stored: list[LogEntry] = []
    for index in range(6):
        move = game.legal_moves()[0]
        game.play(move)
        stored.append(LogEntry(move=move, t_ms=10 * index, id=index + 1))
    shell.logs[(code, number, ann)].extend(stored)
    shell.run(RemoteMoves(code, number, ann, 0, stored[:3], shell.now))  # one batch of three
    racer = room.race.racers[ann]
    assert racer.log_length == 3 and racer.game.entries == [e.move for e in stored[:3]]
    shell.run(RemoteMoves(code, number, ann, 1, stored[1:2], shell.now))  # known: nothing changes
    assert racer.log_length == 3 and not shell.reloads
    shell.run(RemoteMoves(code, number, ann, 4, stored[4:], shell.now))  # entry 3 was lost
    assert [(r.code, r.player_id) for r in shell.reloads] == [(code, ann)]
    shell.run(LogReloaded(code, number, ann, list(shell.logs[(code, number, ann)]), shell.now))
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    assert racer.log_length == 6 and racer.game.entries == [e.move for e in stored]
    assert racer.game.view() == game.view() and racer.state is LogState.IDLE


def test_an_incremental_read_back_plays_only_the_entries_past_the_copy() -> None:
    """RoomChanged with ``starts`` (the shell read each log from the copy's length on): the copy's
    racers are kept, their games not replayed, and the entries read past them are played on them
    (here one entry of Bob's that reached the store without reaching this node). Every game is
    the stored log's, and both racers play on in the next slots."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    racers = room.race.racers
    for conn, racer, move_id in ((conns[0], ann, 1), (conns[0], ann, 2), (conns[1], bob, 1)):
        assert isinstance(shell.move(conn, move_id, racers[racer].game.legal_moves()[0]), p.MoveOk)
    games = {racer: racers[racer].game for racer in (ann, bob)}
    lagging = games[bob].copy()  # Bob's next entry, stored by another node, not played here yet
    extra = lagging.legal_moves()[0]
    lagging.play(extra)
    shell.logs[(code, number, bob)].append(LogEntry(extra, 50))
    starts = {ann: 2, bob: 1}
    tails = {racer: list(shell.logs[(code, number, racer)])[starts[racer] :] for racer in (ann, bob)}
    assert [len(tail) for tail in tails.values()] == [0, 1]
    shell.run(RoomChanged(code, shell.rooms[code], tails, shell.now, starts=starts))
    race = shell.core.rooms[code].race
    assert race is not None
    for racer in (ann, bob):
        assert race.racers[racer].game is games[racer]  # kept, not replayed
        stored = [entry.move for entry in shell.logs[(code, number, racer)]]
        assert race.racers[racer].game.entries == stored and race.racers[racer].log_length == len(stored) == 2
    assert race.racers[bob].game.state_key() == lagging.state_key()
    for conn, racer in ((conns[0], ann), (conns[1], bob)):
        reply = shell.move(conn, 3, race.racers[racer].game.legal_moves()[0])
        assert isinstance(reply, p.MoveOk) and reply.seq == 3, reply
    assert notes(shell, "room_refreshed")[-1].fields["entries_read"] == 1


def test_an_incremental_read_back_of_another_race_reads_the_logs_again() -> None:
    """A tail read for a racer this node's copy does not hold (its copy is of another race: the
    record moved on meanwhile) cannot be completed from the copy: the racer is rebuilt from
    nothing and its whole log is read again (ReloadLog)."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    assert isinstance(shell.move(conns[0], 1, room.race.racers[ann].game.legal_moves()[0]), p.MoveOk)
    del shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]  # the copy lacks her
    shell.run(RoomChanged(code, shell.rooms[code], {ann: []}, shell.now, starts={ann: 1}))
    assert [(r.code, r.race, r.player_id) for r in shell.reloads] == [(code, number, ann)]
    stored = list(shell.logs[(code, number, ann)])
    shell.run(LogReloaded(code, number, ann, stored, shell.now))
    race = shell.core.rooms[code].race
    assert race is not None
    assert race.racers[ann].game.entries == [e.move for e in stored] and race.racers[ann].log_length == 1


def test_a_node_builds_leaderboards_only_for_its_own_connections() -> None:
    """Several nodes: each node sends a room's leaderboards to the members connected to it. An
    audience wholly on other nodes (here the spectator, and Bob of the racers) gets none from this
    node, and none is built for it; Ann, connected here, still gets the whole race's rows, Bob's
    moves (stored by node B) included."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    eve_conn = shell.hello("Eve")
    shell.send(eve_conn, p.Join(code=code, role=p.SPECTATOR))
    eve = pid(shell, eve_conn)
    room = shell.core.rooms[code]
    assert room.race is not None
    number = room.race.record.number
    # Bob and Eve move to node B (as a read-back of the room would say): no connection here.
    shell.disconnect(conns[1])
    shell.disconnect(eve_conn)
    for member in (bob, eve):
        room.members[member].left_ms, room.members[member].node = None, "b"
    room.race.racers[bob].forfeit_at = None
    start = len(shell.effects)
    assert isinstance(shell.move(conns[0], 1, room.race.racers[ann].game.legal_moves()[0]), p.MoveOk)
    theirs = room.race.racers[bob].game.copy()
    entry = LogEntry(move=theirs.legal_moves()[0], t_ms=5, id=1)
    shell.logs[(code, number, bob)].append(entry)
    shell.run(RemoteMoves(code, number, bob, 0, [entry], shell.now))
    shell.advance(6000)  # past a whole leaderboard's interval too (leaderboard_full_ms)
    sent = [e for e in shell.effects[start:] if isinstance(e, Send) and isinstance(e.message, p.Leaderboard)]
    assert sent and all(e.players == (ann,) for e in sent), [e.players for e in sent]
    shown = shell.leaderboards[conns[0]]
    assert {row.player_id: row.moves for row in shown.racers} == {ann: 1, bob: 1}


def stored_entries(game: Game, count: int) -> list[LogEntry]:
    """``count`` entries another node stored for a racer whose game is ``game`` (a copy, played on)."""
    entries = []
    for index in range(count):
        move = game.legal_moves()[0]
        game.play(move)
        entries.append(LogEntry(move=move, t_ms=10 * index, id=index + 1))
    return entries


def test_a_shared_leaderboard_tick_that_raises_rebuilds_the_rooms_it_ticked_and_the_rest_tick_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The node's leaderboard tick is one event for every room due: a room whose tick raises is
    rebuilt from the store with every room that ticked before it in that event (their frames were
    dropped with the event's effects); the rooms not reached keep their due and tick at once, in
    the next shared tick (not put off to the next slot); the rebuilt rooms tick again on later
    changes."""
    shell = Shell()
    rooms = [racing(shell, (f"Ann{i}", f"Bob{i}")) for i in range(3)]
    shell.advance(shell.config.leaderboard_interval_ms)  # past the race start's leaderboards
    opening, home = toggling_moves()
    for conns, _ in rooms:
        for move_id, move in enumerate([*opening, home], start=1):
            assert isinstance(shell.move(conns[0], move_id, move), p.MoveOk)
    edge = shell.leaderboard_wake
    assert edge is not None and edge > shell.now
    due = [code for code, at in shell.core._leaderboards.items() if at == edge]
    assert sorted(due) == sorted(code for _, code in rooms)
    bobs = {code: conns[1] for conns, code in rooms}
    for conn in bobs.values():
        shell.take(conn)
    real_rows = ServerCore._rows
    calls = {"n": 0}

    def failing_rows(core: ServerCore, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the second room's tick
            raise RuntimeError("injected failure")
        return real_rows(core, *args, **kwargs)

    start = len(shell.effects)
    with monkeypatch.context() as patch:
        patch.setattr(ServerCore, "_rows", failing_rows)
        shell.advance(edge - shell.now)  # the shared tick, then the next one at once for the room not reached
    failures = notes(shell, "core_failed", start)
    assert len(failures) == 1 and failures[0].fields["rooms"] == sorted(due[:2]), failures
    assert {e.code for e in shell.effects[start:] if isinstance(e, LoadRoom)} == set(due[:2])
    # The room not reached got its leaderboard (the next shared tick); the rebuilt ones a snapshot.
    got = {code: [m for m in shell.take(conn) if isinstance(m, p.Leaderboard)] for code, conn in bobs.items()}
    assert [b.partial for b in got[due[2]]] == [True]
    assert all(got[code] and not got[code][-1].partial for code in due[:2])
    # The rebuilt rooms tick again: a change goes out with the next shared tick.
    for conns, code in rooms:
        assert phase_of(shell.core, code) == p.RACING
        assert isinstance(shell.move(conns[0], len(opening) + 2, "undo"), p.MoveOk)
    shell.advance(shell.config.leaderboard_interval_ms)
    for code, conn in bobs.items():
        assert len([b for b in shell.take(conn) if isinstance(b, p.Leaderboard)]) == 1, code


def test_one_read_of_the_subscription_is_one_core_event_for_every_racer_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several nodes: the entries one read of the subscription brought, for racers of two rooms, reach
    the core as one RemoteBatch. Each racer's run is played as a RemoteMoves would be (a gap re-reads
    that racer's log only), and each room's wake-up is decided once for them all. A handler that
    raises on one of them rebuilds every room of the batch from the store (the error state)."""
    shell = shared_shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    others, other = racing(shell, ("Cy", "Di"))
    ann, bob, cy = pid(shell, conns[0]), pid(shell, conns[1]), pid(shell, others[0])
    rooms = shell.core.rooms
    number, other_number = (rooms[c].race.record.number for c in (code, other))  # type: ignore[union-attr]
    anns = stored_entries(rooms[code].race.racers[ann].game.copy(), 3)  # type: ignore[union-attr]
    bobs = stored_entries(rooms[code].race.racers[bob].game.copy(), 3)  # type: ignore[union-attr]
    cys = stored_entries(rooms[other].race.racers[cy].game.copy(), 2)  # type: ignore[union-attr]
    for key, entries in (((code, number, ann), anns), ((code, number, bob), bobs), ((other, other_number, cy), cys)):
        shell.logs[key].extend(entries)
    batch = RemoteBatch(
        (
            RemoteMoves(code, number, ann, 0, anns, shell.now),
            RemoteMoves(code, number, bob, 1, bobs[1:], shell.now),  # its first entry was lost: a gap
            RemoteMoves(other, other_number, cy, 0, cys, shell.now),
        ),
        shell.now,
    )
    effects = shell.run(batch)
    assert rooms[code].race.racers[ann].log_length == 3  # type: ignore[union-attr]
    assert rooms[other].race.racers[cy].game.entries == [e.move for e in cys]  # type: ignore[union-attr]
    assert [(r.code, r.player_id) for r in shell.reloads] == [(code, bob)]
    # One wake-up decision each at most for the three runs: each room's own, and the node's
    # shared leaderboard tick.
    wakes = [e.code for e in effects if isinstance(e, Wake)]
    assert len(wakes) == len(set(wakes)) and set(wakes) <= {code, other}
    assert sum(isinstance(e, WakeLeaderboards) for e in effects) <= 1
    shell.run(LogReloaded(code, number, bob, list(shell.logs[(code, number, bob)]), shell.now))
    assert rooms[code].race.racers[bob].log_length == 3  # type: ignore[union-attr]

    # A handler that raises: every room of the batch is rebuilt from the store, then plays on.
    more = stored_entries(rooms[other].race.racers[cy].game.copy(), 1)  # type: ignore[union-attr]
    shell.logs[(other, other_number, cy)].extend(more)
    anns_more = stored_entries(rooms[code].race.racers[ann].game.copy(), 1)  # type: ignore[union-attr]
    shell.logs[(code, number, ann)].extend(anns_more)

    real_play = Game.play
    calls = {"n": 0}

    def failing_play(game: Game, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # the batch's; the rebuild's replay plays
            raise RuntimeError("injected failure")
        return real_play(game, *args, **kwargs)

    start = len(shell.effects)
    with monkeypatch.context() as patch:
        patch.setattr(Game, "play", failing_play)
        runs = (
            RemoteMoves(other, other_number, cy, 2, more, shell.now),
            RemoteMoves(code, number, ann, 3, anns_more, shell.now),
        )
        shell.run(RemoteBatch(runs, shell.now))
    failures = notes(shell, "core_failed", start)
    assert len(failures) == 1 and failures[0].fields["rooms"] == sorted([code, other]), failures
    assert {e.code for e in shell.effects[start:] if isinstance(e, LoadRoom)} == {code, other}
    for room, racer, entries in ((other, cy, [*cys, *more]), (code, ann, [*anns, *anns_more])):
        rebuilt = shell.core.rooms[room].race.racers[racer]  # type: ignore[union-attr]
        assert rebuilt.game.entries == [e.move for e in entries]  # from the log


def test_a_stale_room_is_read_back_from_where_its_copy_lines_up() -> None:
    """Several nodes: a room the store may hold newer is read back with each racer's known log
    length (a read of that race starts there); a room not held here is not read back at all."""
    shell = shared_shell()
    conns, code = racing(shell)
    shell.move(conns[0], 1, "stock>waste")
    shell.run(RoomStale(code, shell.now))
    [read_back] = shell.read_backs
    race = shell.core.rooms[code].race
    assert race is not None and read_back.race == race.record.number and not read_back.first
    assert read_back.lengths == {pid(shell, conns[0]): 1}  # racers with nothing stored start at 0
    shell.run(RoomStale("ZZZZZ", shell.now, first=True))
    assert len(shell.read_backs) == 1


def test_room_commands_are_kept_for_a_read_back_and_moves_are_not() -> None:
    """Several nodes: a command that changed a room is kept (KeepCommand, before the save it goes
    with); a move, a ping or a room list is not."""
    shell = shared_shell()
    conns, code = lobby(shell)
    effects = shell.send(conns[1], p.Ready(ready=False))
    kept = [e for e in effects if isinstance(e, KeepCommand)]
    assert [k.codes for k in kept] == [(code,)] and isinstance(effects[0], KeepCommand)
    assert not any(isinstance(e, KeepCommand) for e in shell.send(conns[1], p.Ping(t=1)))
    one_node = Shell()
    one_conns, _ = lobby(one_node)
    assert not any(isinstance(e, KeepCommand) for e in one_node.send(one_conns[1], p.Ready(ready=False)))
