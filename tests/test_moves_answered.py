"""A batch of the store's answers as one core event (``MovesAnswered``, the shell's group commit):
every racer gets what it gets with the answers one by one, and the room ends in the same state.
Plain calls on the room core (the Shell of test_room_core)."""

from __future__ import annotations

import random

from support import Shell, pid, racing

from server.core.events import MovesAnswered, PersistMove
from shared import protocol as p
from shared.engine import UNDO


def play(batched: bool) -> tuple[list[list[p.MoveOk | p.MoveRejected | p.Leaderboard]], list[list[str]]]:
    """Four racers send moves (some illegal, undos among them) two at a time per racer; the store
    answers each round's writes one by one, or as one batch."""
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob", "Cy", "Di"))
    race = shell.core.rooms[code].race
    assert race is not None
    racers = [race.racers[pid(shell, conn)] for conn in conns]
    rng = random.Random(11)
    shell.hold_persists = True
    move_id = 0
    for _ in range(40):
        for conn, racer in zip(conns, racers, strict=True):
            legal = racer.game.legal_moves() or ["stock>waste"]
            for move in (rng.choice(legal), rng.choice([*legal, UNDO, "t0>t1"])):
                move_id += 1
                shell.send(conn, p.Move(id=move_id, move=move))
        while shell.held:
            shell.release_batch() if batched else shell.release()
    answers = [
        [m for m in shell.take(conn) if isinstance(m, p.MoveOk | p.MoveRejected | p.Leaderboard)] for conn in conns
    ]
    return answers, [list(r.game.entries) for r in racers]


def test_a_batch_of_answers_is_the_answers_one_by_one() -> None:
    one_by_one, entries = play(batched=False)
    batched, batched_entries = play(batched=True)
    assert batched_entries == entries and sum(len(e) for e in entries) > 100
    assert batched == one_by_one


def test_a_batch_answers_every_racer_it_names_and_leaves_no_write_behind() -> None:
    shell = Shell()
    conns, code = racing(shell, ("Ann", "Bob"))
    shell.hold_persists = True
    race = shell.core.rooms[code].race
    assert race is not None
    for n, conn in enumerate(conns):
        racer = race.racers[pid(shell, conn)]
        shell.send(conn, p.Move(id=n + 1, move=racer.game.legal_moves()[0]))
    assert len(shell.held) == 2 and all(isinstance(e, PersistMove) for e in shell.held)
    effects = shell.run(MovesAnswered(tuple(shell.answer_write(e) for e in shell.held), shell.now))
    shell.held.clear()
    assert not any(isinstance(e, PersistMove) for e in effects)
    for n, conn in enumerate(conns):
        oks = [m for m in shell.take(conn) if isinstance(m, p.MoveOk)]
        assert [m.id for m in oks] == [n + 1] and oks[0].seq == 1
