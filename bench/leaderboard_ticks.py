"""The room core under the nodes bench's load, on the test shell's simulated clock: how many tick
events a node handles per second, the core's CPU per move, and how long a card sent home takes to
show on the room's spectator's leaderboard (docs/benchmarks.md, "One leaderboard tick per node").

    .venv/bin/python bench/leaderboard_ticks.py                    # 40 rooms x 8 racers x 2 moves/s, 20 s
    PYTHONPATH=/tmp/old .venv/bin/python bench/leaderboard_ticks.py  # another checkout's core, the same load

Each room has its racers and one spectator; each racer plays a legal move (a card home half the
times one is there) every 1/pace s at its own phase, as bench/nodes_bench.py's racers do. The
counts and delays are exact (no sockets, no event loop: the shell fires the core's wake-ups in time
order, on time); the CPU is ``ServerCore.handle``'s own (process time), without the shell's timers and frames,
which the shared tick saves as well. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from typing import Any

from nodes_bench import percentile  # the nodes bench's, whose delays these set beside

from server.core import CoreConfig
from server.core.events import Effect, Event
from server.testing.shell import Shell, lobby, pid
from shared import protocol as p


def simulate(rooms: int, racers: int, pace: float, seconds: float, seed: int = 7) -> dict[str, Any]:
    shell = Shell(CoreConfig())
    rng = random.Random(seed)
    members: list[tuple[list[int], str]] = []
    spectators: set[int] = set()
    for r in range(rooms):
        conns, code = lobby(shell, tuple(f"R{r}x{i}" for i in range(racers)))
        spectator = shell.hello(f"S{r}")
        shell.send(spectator, p.Join(code=code, role=p.SPECTATOR))
        members.append((conns, code))
        spectators.add(spectator)
    # Cards sent home, by player, waiting to show on the spectator's leaderboard: (when, cards).
    waiting: dict[str, list[tuple[int, int]]] = {}
    delays: list[int] = []
    deliver = shell.deliver

    def watch(conn: int, player_id: str | None, message: p.ServerMessage) -> None:
        if conn in spectators and isinstance(message, p.Leaderboard):
            for row in message.racers:
                changes = waiting.get(row.player_id)
                while changes and changes[0][1] <= row.cards:  # no undo: cards only grow
                    delays.append(shell.now - changes.pop(0)[0])
        deliver(conn, player_id, message)

    shell.deliver = watch  # type: ignore[method-assign]
    for conns, _ in members:
        shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms + 1000)
    core = shell.core
    handle = core.handle
    spent = [0.0]
    events: Counter[str] = Counter()

    def timed(event: Event) -> list[Effect]:
        events[type(event).__name__] += 1
        started = time.process_time()
        try:
            return handle(event)
        finally:
            spent[0] += time.process_time() - started

    core.handle = timed  # type: ignore[method-assign]
    step = round(1000 / pace)
    start = shell.now + step  # delays are timed after every racer's first move
    # Each racer's next move: (when, its connection, its room, its player id), in time order.
    plan: list[tuple[int, int, str, str]] = [
        (shell.now + rng.randrange(step), conn, code, pid(shell, conn)) for conns, code in members for conn in conns
    ]
    due = sorted(plan)
    ids: dict[int, int] = {}
    end = shell.now + round(seconds * 1000)
    moves = 0
    while due and due[0][0] < end:
        at, conn, code, player = due.pop(0)
        shell.advance(at - shell.now)
        room = core.rooms[code]
        assert room.race is not None
        legal = [m for m in room.race.racers[player].game.legal_moves() if m != "undo"]
        home = [m for m in legal if ">f" in m]
        if legal:
            move = rng.choice(home) if home and rng.random() < 0.5 else rng.choice(legal)
            ids[conn] = ids.get(conn, 0) + 1
            game = room.race.racers[player].game
            cards = game.foundation_cards
            shell.move(conn, ids[conn], move)
            moves += 1
            if game.foundation_cards > cards and at >= start:
                waiting.setdefault(player, []).append((shell.now, game.foundation_cards))
        shell.inbox.clear()
        shell.effects.clear()
        next_at = (at + step, conn, code, player)
        index = next((i for i, d in enumerate(due) if d > next_at), len(due))
        due.insert(index, next_at)
    shell.advance(end - shell.now)
    return {
        "rooms": rooms,
        "racers": racers,
        "pace": pace,
        "seconds": seconds,
        "moves": moves,
        "core_us_per_move": round(spent[0] / max(1, moves) * 1e6, 1),
        "room_ticks_per_s": round(events["Tick"] / seconds, 1),
        "shared_ticks_per_s": round(events["LeaderboardTick"] / seconds, 1),
        "events_per_move": round(sum(events.values()) / max(1, moves), 2),
        "cards_home_timed": len(delays),
        "spectator_delay_ms_p50": percentile([float(d) for d in delays], 0.5),
        "spectator_delay_ms_p99": percentile([float(d) for d in delays], 0.99),
        "spectator_delay_ms_max": max(delays, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rooms", type=int, default=40)
    parser.add_argument("--racers", type=int, default=8, help="racers per room")
    parser.add_argument("--pace", type=float, default=2.0, help="moves per second per racer")
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated seconds")
    args = parser.parse_args()
    print(json.dumps(simulate(args.rooms, args.racers, args.pace, args.seconds)))


if __name__ == "__main__":
    main()
