"""Room chat in the room core, on the test shell: the core's CPU per chat line in a room with many
spectators, and what the chat history adds to the room record the store keeps (docs/store.md and
docs/benchmarks.md, "Chat").

    .venv/bin/python bench/chat_bench.py                        # 8 racers, 1000 spectators, 2000 lines
    .venv/bin/python bench/chat_bench.py --spectators 0 --lines 500

Every line is said by a member in turn (racers and spectators alike, within the rate limit) while
the room's race runs; the CPU is ``ServerCore.handle``'s own (process time) for the chat events,
with the room's save and its one ``Send`` to every reader as effects (the fan-out's encoding is the
shell's, not counted). The record sizes are those of the room's record with no chat and with a
full history of the longest lines (200 characters of three bytes each). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import msgspec

from server.core import CoreConfig
from server.core.events import ClientEvent, Effect, SaveRoom, Send
from server.core.records import encode_record
from server.testing.shell import Shell, lobby
from shared import protocol as p


def measure(racers: int, spectators: int, lines: int) -> dict[str, Any]:
    shell = Shell(CoreConfig(chat_burst=10**9, chat_room_per_s=10**9))  # the rate limits are not measured
    conns, code = lobby(shell, tuple(f"R{i}" for i in range(racers)))
    watchers = []
    for i in range(spectators):
        conn = shell.hello(f"S{i}")
        shell.send(conn, p.Join(code=code, role=p.SPECTATOR))
        watchers.append(conn)
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    speakers = conns + watchers
    core = shell.core
    cpu = 0.0
    saves = sends = readers = 0
    for i in range(lines):
        event = ClientEvent(speakers[i % len(speakers)], p.Chat(text=f"line {i}: good luck everyone"), shell.now)
        start = time.process_time()
        effects = core.handle(event)
        cpu += time.process_time() - start
        stored: list[Effect] = [e for e in effects if isinstance(e, SaveRoom)]
        saves += len(stored)
        shell.apply(stored)  # into the shell's store (its sends are counted, not delivered)
        for effect in effects:
            if isinstance(effect, Send) and isinstance(effect.message, p.ChatSaid):
                sends += 1
                readers += len(effect.players)
        shell.now += 10
    record = shell.rooms[code]
    full = [
        p.ChatLine(seq=n, player_id="p" + "0" * 16, name="x" * 24, role=p.SPECTATOR, text="北" * p.CHAT_MAX, at=1)
        for n in range(core.config.chat_history)
    ]
    bare = msgspec.structs.replace(record, chat=[])
    return {
        "racers": racers,
        "spectators": spectators,
        "lines": lines,
        "core_us_per_line": round(cpu / lines * 1e6, 1),
        "saves_per_line": saves / lines,
        "sends_per_line": sends / lines,
        "readers_per_line": readers / lines,
        "record_bytes_no_chat": len(encode_record(bare)),
        "record_bytes_full_history": len(encode_record(msgspec.structs.replace(record, chat=full))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--racers", type=int, default=8)
    parser.add_argument("--spectators", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(measure(args.racers, args.spectators, args.lines)))


if __name__ == "__main__":
    main()
