"""The move path without a copy of the game per move: every entry (a plain move, undo, resign) is
checked on the racer's position (the engine's check) and played on that game once the store holds
it. Plain calls on the room core (the Shell of test_room_core)."""

from __future__ import annotations

import random

from support import DEAL, Shell, board, pid, racing

from server.core.events import LogReloaded, Note
from shared import protocol as p
from shared.engine import RESIGN, UNDO, Game, IllegalMove


def test_random_games_match_the_engine_move_by_move_with_writes_held() -> None:
    # Every move, legal or not, answered exactly as the engine answers it on the same position;
    # two moves sent per write, so the second is checked only after the first is stored.
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    reference = Game(DEAL)
    rng = random.Random(7)
    shell.hold_persists = True
    move_id = 0
    for _ in range(120):
        if reference.over:
            break
        legal = reference.legal_moves()
        shown = racer.game.state_key()
        batch = [rng.choice(legal) if legal else "stock>waste", rng.choice(["t0>t1", "waste>f3", "reserve>t2", UNDO])]
        for move in batch:
            move_id += 1
            shell.send(conns[0], p.Move(id=move_id, move=move))
        assert racer.game.state_key() == shown  # nothing applied before the store holds it
        while shell.held:
            shell.release()
        answers = {m.id: m for m in shell.take(conns[0]) if isinstance(m, p.MoveOk | p.MoveRejected)}
        for offset, move in enumerate(batch):
            answer = answers[move_id - len(batch) + 1 + offset]
            expected: str | None = None  # the oracle: the old path, playing the move on a copy
            try:
                reference.copy().play(move)
            except IllegalMove as exc:
                expected = exc.reason
            if expected is None:
                reference.play(move)
                assert isinstance(answer, p.MoveOk), (move, answer)
                assert answer.view == reference.view()
            else:
                assert isinstance(answer, p.MoveRejected) and answer.reason == expected, (move, answer)
        assert racer.game.state_key() == reference.state_key() and racer.game.entries == reference.entries
    assert move_id > 40


def test_undo_and_resign_in_flight_leave_the_game_untouched_until_stored() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    racer = shell.core.rooms[code].race.racers[ann]  # type: ignore[union-attr]
    move = next(m for m in racer.game.legal_moves() if m != "stock>waste" and not m.startswith("reserve"))
    shell.send(conns[0], p.Move(id=1, move=move))
    shown = racer.game.state_key()
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=2, move=UNDO))
    assert racer.game.state_key() == shown  # checked, not played: the store does not hold it yet
    shell.release()
    answers = [m for m in shell.take(conns[0]) if isinstance(m, p.MoveOk) and m.id == 2]
    assert len(answers) == 1 and racer.game.entries == [move, UNDO]
    reference = Game(DEAL)
    reference.play(move)
    reference.play(UNDO)
    assert racer.game.state_key() == reference.state_key()
    shell.send(conns[0], p.Move(id=3, move=RESIGN))
    assert racer.game.status == "playing"  # the racer's game is untouched until the store holds it
    shell.release()
    assert racer.game.status == "resigned"


def test_a_move_the_game_refuses_once_stored_rebuilds_the_racer_from_the_log() -> None:
    # Cannot happen in the server (nothing changes the position while its write is in flight);
    # forced here by changing the game behind the core's back: no crash, the log decides.
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    ann = pid(shell, conns[0])
    race = shell.core.rooms[code].race
    assert race is not None
    shell.hold_persists = True
    shell.send(conns[0], p.Move(id=1, move="stock>waste"))
    race.racers[ann].game.play(RESIGN)  # the divergence
    shell.take(conns[0])
    start = len(shell.effects)
    shell.release()
    effects = shell.effects[start:]
    assert any(isinstance(e, Note) and e.event == "persist_unplayable" for e in effects)
    assert shell.reloads and shell.take(conns[0]) == []
    shell.run(LogReloaded(code, 1, ann, list(shell.logs[(code, 1, ann)]), shell.now))
    ok = shell.inbox[conns[0]][-1]
    assert isinstance(ok, p.MoveOk) and ok.id == 1 and ok.seq == 1 and board(ok).stock == 77
    assert race.racers[ann].game.status == "playing"
