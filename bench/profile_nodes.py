"""Where a node's CPU goes, from the py-spy profiles ``bench/nodes_bench.py --profile DIR`` writes.

.venv/bin/python bench/profile_nodes.py DIR/split-run1-node1.txt [more files] [--moves N] [--top
20]

Each sample (a collapsed stack) goes to the first part below whose test its stack passes, so the
parts add up to the samples counted: the subscription's read and parse; the shell's grouping and
decoding of other nodes' entries; the core applying them (``_remote_moves``: the engine replaying
them, the budgeted blocked check, the rest) and the core's own per-event work around it (the error-
state snapshot, the deadline table, effects such as rescheduling a room's wake-up); the room ticks
(``Timers._due`` in server/shell/timers.py: leaderboard rows, their comparison, encoding, writing
to the connections, the rest); heartbeats and liveness; the node's own racers' moves (frames in,
the group commit to Redis); anything else. Stacks whose innermost frame is the event loop's runner
are left out, as ``bench/profile_move.py`` does (py-spy could not tell an idle loop from a busy one
on this VM; a ``--native`` profile shows those samples to be mostly ``epoll_pwait``, the loop
waiting), and so are native stacks ending in ``epoll_pwait``. With ``--moves N`` (the moves
acknowledged in the window, from nodes_bench's JSON) each part is also given in µs per move, at
``--rate`` samples per second (500, nodes_bench's)."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

Frames = Sequence[tuple[str, str]]  # (function, file), outermost first


def named(name: str, function: str) -> bool:
    """py-spy names methods ``Class.method``: either form matches ``function``."""
    return name == function or name.rpartition(".")[2] == function


def has(frames: Frames, function: str, file: str = "") -> bool:
    return any(named(name, function) and file in where for name, where in frames)


def in_file(frames: Frames, file: str) -> bool:
    return any(file in where for _name, where in frames)


def under(frames: Frames, function: str, file: str = "") -> Frames:
    """The frames below the outermost call of ``function`` (empty if it is not on the stack)."""
    for index, (name, where) in enumerate(frames):
        if named(name, function) and file in where:
            return frames[index + 1 :]
    return ()


ENGINE = "shared/engine.py"


# The shell's timer callbacks: a room's own wake-up, and the node's shared leaderboard tick.
TIMERS = ("_due", "_leaderboards_due")


def ticking(frames: Frames) -> bool:
    return any(has(frames, timer, "server/shell/timers.py") for timer in TIMERS)


def tick_part(frames: Frames) -> str:
    below = next((b for timer in TIMERS if (b := under(frames, timer, "server/shell/timers.py"))), ())
    if has(below, "_rows"):
        return "tick: leaderboard rows (rank, build)"
    if has(below, "_leaderboard_update"):
        return "tick: leaderboard rows compared (partial)"
    if has(below, "_boards_message"):
        return "tick: spectators' boards"
    if any("encode" in name for name, _ in below):
        return "tick: frames encoded"
    if in_file(below, "websockets/") or has(below, "_deliver") or has(below, "deliver", "server/shell/delivery.py"):
        return "tick: frames written to connections"
    if has(below, "_next_wake") or has(below, "_deadlines") or has(below, "_schedule_leaderboard"):
        return "tick: deadline table, next wake-up"
    if has(below, "_wake"):
        return "tick: timer rescheduled"
    return "tick: the rest (dispatch, event, effects)"


def remote_part(frames: Frames) -> str:
    below = under(frames, "_on_messages", "server/shell/several_nodes.py")
    if has(below, "_settle_blocked"):
        return "remote: blocked check (_settle_blocked)"
    if has(below, "_remote_moves"):
        return "remote: engine replay" if in_file(under(below, "_remote_moves"), ENGINE) else "remote: core bookkeeping"
    if has(below, "decode_entry") or has(below, "decode"):
        return "remote: entries decoded"
    if has(below, "handle", "server/core/machine.py"):
        return "remote: core per-event work (snapshot, deadline table)"
    if has(below, "execute") or has(below, "_wake"):
        return "remote: effects (wake-up rescheduled)"
    return "remote: grouped into runs (shell)"


PARTS: list[tuple[str | Callable[[Frames], str], Callable[[Frames], bool]]] = [
    (remote_part, lambda f: has(f, "_on_messages", "server/shell/several_nodes.py")),
    ("pub/sub: read and parse (hiredis, messages)", lambda f: has(f, "_read", "server/nodes.py")),
    (tick_part, ticking),
    ("heartbeats, liveness, sweeps", lambda f: has(f, "_beat", "server/nodes.py") or in_file(f, "server/nodes.py")),
    ("own racers: the group commit to Redis", lambda f: in_file(f, "server/store/") or in_file(f, "redis/")),
    ("own racers: frames in, moves (core)", lambda f: in_file(f, "websockets/") or in_file(f, "server/core/")),
]

RUNNERS = ("asyncio/runners.py", "uvloop/__init__.py", "asyncio/base_events.py")
IDLE = {"epoll_pwait", "epoll_wait", "select", "poll"}  # with --native: the loop waiting, seen in C
SYSCALLS = {"read", "write", "writev", "send", "recv", "sendmsg", "recvmsg", "getpid", "syscall"}


def parse_frame(text: str) -> tuple[str, str]:
    """py-spy's ``function (file:line)`` -> (function, file)."""
    function, _, where = text.rpartition(" (")
    if not function:
        return text, ""
    return function, where.rstrip(")").rsplit(":", 1)[0]


def parts_of(raw: str) -> tuple[Counter[str], Counter[tuple[str, str]], int]:
    """Samples per part, samples per innermost function, and loop-only samples left out."""
    parts: Counter[str] = Counter()
    leaves: Counter[tuple[str, str]] = Counter()
    skipped = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [parse_frame(frame) for frame in stack.split(";")]
        if not frames or frames[-1][1].endswith(RUNNERS) or frames[-1][0] in IDLE:
            skipped += count
            continue
        leaves[frames[-1]] += count
        python = [frame for frame in frames if frame[1].endswith(".py")]
        if python and python[-1][1].endswith(RUNNERS):  # --native: the loop's own C code (uvloop), busy
            kind = "I/O system calls" if frames[-1][0] in SYSCALLS else "callbacks, timers, transports"
            parts[f"event loop itself (uvloop, C): {kind}"] += count
            continue
        for part, test in PARTS:
            if test(frames):
                parts[part if isinstance(part, str) else part(frames)] += count
                break
        else:
            parts["other (event loop, logging, ...)"] += count
    return parts, leaves, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--moves", type=float, help="moves acknowledged in the window (summed over the files' runs)")
    parser.add_argument("--rate", type=float, default=500.0, help="py-spy's samples per second")
    parser.add_argument("--top", type=int, default=15, help="also the N hottest innermost functions")
    args = parser.parse_args()
    parts: Counter[str] = Counter()
    leaves: Counter[tuple[str, str]] = Counter()
    skipped = 0
    for file in args.files:
        more, hot, left = parts_of(file.read_text())
        parts.update(more)
        leaves.update(hot)
        skipped += left
    total = sum(parts.values())
    print(f"{total} samples counted, {skipped} loop-only left out")
    for part, count in sorted(parts.items(), key=lambda item: -item[1]):
        per_move = f"  {count / args.rate / args.moves * 1e6:7.1f} us/move" if args.moves else ""
        print(f"{count / max(1, total) * 100:6.1f}%  {count:6d}{per_move}  {part}")
    if args.top:
        print("hottest innermost functions:")
        for (function, file), count in leaves.most_common(args.top):
            print(f"{count / max(1, total) * 100:6.1f}%  {function} ({file})")


if __name__ == "__main__":
    main()
