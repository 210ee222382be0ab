"""What a ghost costs a room (docs/benchmarks.md, "Ghosts"): the room core's CPU per second of race
for each ghost, on the test shell's simulated clock, and the bytes a ghost adds to the room record.

    .venv/bin/python bench/ghost_cost.py                       # 20 rooms, 0/1/4/8 ghosts, 60 s of race
    .venv/bin/python bench/ghost_cost.py --pace 4 --seconds 120

Each room has one racer, who does not move (so what is measured is the ghosts), and one spectator
(so both leaderboard feeds run). Every ghost is a record of the room's deal played by the greedy
policy at ``--pace`` entries a second (seeded jitter of 0.5x-1.5x per entry), for the whole race.
The CPU is ``ServerCore.handle``'s own (process time: the ghost wake-ups, the leaderboard ticks
that carry their rows), plus encoding every leaderboard frame once (what the shell does before
sending it to a room's connections). Each figure is the median of ``--repeat`` runs; the cost of a
ghost is (rooms with K ghosts - rooms with none) / K. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from server.core import CoreConfig
from server.core.events import Effect, Event, Send
from server.core.records import encode_record
from server.testing.shell import Shell, lobby
from shared import protocol as p
from shared.engine import Game


def ghost_record(deal: int, pace: float, until_ms: float, seed: int) -> tuple[list[str], list[int]]:
    """A record that lasts the race: home first, else the stock, else any move but undo."""
    rng = random.Random(seed)
    game = Game(deal)
    moves: list[str] = []
    times: list[int] = []
    t = 0.0
    while not game.over and len(moves) < 4000 and t < until_ms:
        legal = [m for m in game.legal_moves() if m != "undo"]
        home = [m for m in legal if ">f" in m]
        other = "stock>waste" if "stock>waste" in legal else rng.choice(legal) if legal else "resign"
        move = rng.choice(home) if home else other
        game.play(move)
        t += rng.uniform(0.5, 1.5) * 1000 / pace
        moves.append(move)
        times.append(round(t))
    return moves, times


def simulate(rooms: int, ghosts: int, pace: float, seconds: float, seed: int) -> dict[str, Any]:
    shell = Shell(CoreConfig())
    codes: list[str] = []
    record_bytes: list[int] = []
    for r in range(rooms):
        deal = 1000 + r
        conns, code = lobby(shell, (f"R{r}",), deal=deal)
        spectator = shell.hello(f"S{r}")
        shell.send(spectator, p.Join(code=code, role=p.SPECTATOR))
        before = len(encode_record(shell.core.room_record(code)))  # type: ignore[arg-type]
        for g in range(ghosts):
            moves, times = ghost_record(deal, pace, seconds * 1000, seed * 1000 + r * 16 + g)
            for start in range(0, len(moves), p.GHOST_CHUNK_MAX):
                end = start + p.GHOST_CHUNK_MAX
                part = p.AddGhost(
                    name=f"G{g}",
                    deal=deal,
                    moves=moves[start:end],
                    times=times[start:end],
                    offset=start,
                    more=end < len(moves),
                )
                shell.send(conns[0], part)
        record = shell.core.room_record(code)
        assert record is not None and len(record.ghosts) == ghosts, shell.take(conns[0])
        record_bytes.append(len(encode_record(record)) - before)
        shell.send(conns[0], p.Start())
        codes.append(code)
    shell.advance(shell.config.countdown_ms)
    core = shell.core
    handle = core.handle
    spent = [0.0, 0.0]  # the core's, the frames' encoding
    frames = [0, 0]  # leaderboard frames, their bytes

    def timed(event: Event) -> list[Effect]:
        started = time.process_time()
        effects = handle(event)
        middle = time.process_time()
        for effect in effects:
            if isinstance(effect, Send) and isinstance(effect.message, p.Leaderboard):
                frames[0] += 1
                frames[1] += len(p.encode(effect.message))
        spent[0] += middle - started
        spent[1] += time.process_time() - middle
        return effects

    core.handle = timed  # type: ignore[method-assign]
    step = 1000
    for _ in range(round(seconds)):
        shell.advance(step)
        shell.inbox.clear()
        shell.effects.clear()
    room_seconds = rooms * seconds
    return {
        "core_us_per_room_s": spent[0] / room_seconds * 1e6,
        "encode_us_per_room_s": spent[1] / room_seconds * 1e6,
        "leaderboard_frames_per_room_s": frames[0] / room_seconds,
        "leaderboard_bytes_per_room_s": frames[1] / room_seconds,
        "record_bytes_per_ghost": statistics.median(record_bytes) / ghosts if ghosts else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rooms", type=int, default=20)
    parser.add_argument("--ghosts", default="0,1,4,8", help="ghosts per room, a comma-separated list")
    parser.add_argument("--pace", type=float, default=2.0, help="each ghost's entries per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of race")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.ghosts.split(",")]
    runs: dict[int, list[dict[str, Any]]] = {
        n: [simulate(args.rooms, n, args.pace, args.seconds, seed) for seed in range(1, args.repeat + 1)]
        for n in counts
    }

    def median(n: int, key: str) -> float:
        return float(statistics.median(run[key] for run in runs[n]))

    base = 0 if 0 in runs else None
    rows: dict[str, Any] = {}
    for n in counts:
        total = median(n, "core_us_per_room_s") + median(n, "encode_us_per_room_s")
        row: dict[str, Any] = {
            "cpu_us_per_room_s": round(total, 1),
            "core_us_per_room_s": round(median(n, "core_us_per_room_s"), 1),
            "encode_us_per_room_s": round(median(n, "encode_us_per_room_s"), 1),
            "leaderboard_frames_per_room_s": round(median(n, "leaderboard_frames_per_room_s"), 2),
            "leaderboard_bytes_per_room_s": round(median(n, "leaderboard_bytes_per_room_s")),
            "record_bytes_per_ghost": round(median(n, "record_bytes_per_ghost")),
        }
        if base is not None and n:
            zero = median(0, "core_us_per_room_s") + median(0, "encode_us_per_room_s")
            row["cpu_us_per_ghost_s"] = round((total - zero) / n, 1)
        rows[str(n)] = row
    print(json.dumps({"rooms": args.rooms, "pace": args.pace, "seconds": args.seconds, "by_ghosts": rows}))


if __name__ == "__main__":
    main()
