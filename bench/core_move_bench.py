"""The room core's CPU per move on the home-undo workload, in one process: no sockets, no event
loop, no store (docs/benchmarks.md, "The move path on the home-undo workload").

    .venv/bin/python bench/core_move_bench.py                        # this tree (its compiled engine if built)
    PLOT_PURE_PYTHON=1 .venv/bin/python bench/core_move_bench.py     # the pure-Python engine
    cd /tmp/old && PYTHONPATH=/tmp/old /work/wt/.venv/bin/python /work/wt/bench/core_move_bench.py
                                                                     # another checkout's core, the same load

Rooms of 8 racers on the test shell (server/testing/shell.py); in each round every racer sends one
move, a card home from the waste or a tableau pile, or the undo of its last one (where no card
can go home, a legal move), and the store answers the round's writes as the shell's group commit
does (one ``MovesAnswered``; a tree without it, one answer at a time, as its shell did). Timed:
``ServerCore.handle`` alone (each move's event and the batch's), in CPU time (``process_time``
around each call: a neighbour on the core does not count, its cache misses do); the best of
``--repeat`` passes, since a busy machine only ever adds. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import shared.engine
from server.core.events import Effect, Event
from server.testing.shell import Shell, lobby
from shared import protocol as p
from shared.engine import UNDO, Game


def home_move(game: Game) -> str | None:
    return next((m for m in game.legal_moves() if ">f" in m and not m.startswith("reserve")), None)


def one_pass(rooms: int, rounds: int) -> tuple[float, int]:
    shell = Shell()
    conns_of: list[int] = []
    for r in range(rooms):
        conns, _ = lobby(shell, tuple(f"R{r}x{i}" for i in range(8)))
        shell.send(conns[0], p.Start())
        conns_of += conns
    shell.advance(shell.config.countdown_ms + 1000)
    games: list[tuple[int, Game]] = []
    for conn in conns_of:
        player = shell.core.players[shell.core.conns[conn] or ""]
        room = shell.core.rooms[player.room or ""]
        assert room.race is not None
        games.append((conn, room.race.racers[player.player_id].game))
    core = shell.core
    handle = core.handle
    spent = [0.0]

    def timed(event: Event) -> list[Effect]:
        t0 = time.process_time()
        out = handle(event)
        spent[0] += time.process_time() - t0
        return out

    core.handle = timed  # type: ignore[method-assign]
    batched = getattr(shell, "release_batch", None)
    shell.hold_persists = True
    undo_next = [False] * len(games)
    move_id = 0
    for _ in range(rounds):
        for i, (conn, game) in enumerate(games):
            move_id += 1
            move = UNDO if undo_next[i] else home_move(game)
            undo_next[i] = move is not None and move != UNDO
            if move is None:
                move = (game.legal_moves() or ["stock>waste"])[0]
            shell.send(conn, p.Move(id=move_id, move=move))
        if batched is not None:
            batched()
        else:
            shell.release()
        for conn, _ in games:
            shell.take(conn)
    return spent[0], move_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    passes = [one_pass(opts.rooms, opts.rounds) for _ in range(opts.repeat)]
    per_move = [spent / moves * 1e6 for spent, moves in passes]
    out: dict[str, Any] = {
        "engine": "compiled" if not (shared.engine.__file__ or "").endswith(".py") else "pure",
        "rooms": opts.rooms,
        "moves_per_pass": passes[0][1],
        "core_us_per_move_best": round(min(per_move), 2),
        "core_us_per_move_passes": [round(x, 2) for x in per_move],
        "python": sys.version.split()[0],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
