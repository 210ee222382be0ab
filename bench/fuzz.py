"""The long fuzzing run: frames through the real decoder and the real room core.

    .venv/bin/python bench/fuzz.py --frames 1000000 --seed 1            # the figures in docs/reliability.md
    .venv/bin/python bench/fuzz.py --frames 20000 --seed 7              # a quick one
    .venv/bin/python bench/fuzz.py --frames 1000000 --seed 1 --stress   # 10 clients, 5x the store faults
    .venv/bin/python bench/fuzz.py --seed 1 --frames 118 --start-frame 117 --verbose   # reproduce a failure

Prints the frame count, the throughput and every failure with its reproducer (the seed and the
frame index). ``--start-frame`` replays the episode holding that frame from its start, silently,
then feeds (and with ``--verbose`` traces: events, messages out) from that frame on. Exit status
1 if any invariant broke. ``--json FILE`` also writes the result as JSON. One core: the driver is
single-threaded (server/testing/fuzzing.py describes the campaign and its invariants).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine_info import cpu_name  # noqa: E402  (bench/ is the script folder)

from server.testing.fuzzing import run_campaign  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to feed (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--start-frame", type=int, default=0, help="first frame to feed (its episode is replayed up to it)"
    )
    parser.add_argument("--episode-frames", type=int, default=5000, help="frames per episode (a fresh store and core)")
    parser.add_argument("--max-failures", type=int, default=10)
    parser.add_argument(
        "--stress", action="store_true", help="10 clients, 5x the store faults, a restart every ~500 frames"
    )
    parser.add_argument(
        "--room-ttl",
        type=float,
        help="seconds the store keeps a room after its last use (default: longer than an episode)",
    )
    parser.add_argument("--verbose", action="store_true", help="trace every event and message from --start-frame on")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)

    def progress(index: int, seconds: float) -> None:
        done = index - args.start_frame
        print(f"  {index:>9,} frames  {seconds:7.1f} s  {done / seconds if seconds else 0:8,.0f} frames/s", flush=True)

    variant = " (stress)" if args.stress else ""
    print(
        f"fuzz{variant}: seed {args.seed}, frames {args.start_frame:,}..{args.frames - 1:,}, on {machine()}", flush=True
    )
    result = run_campaign(
        args.frames,
        args.seed,
        episode_frames=args.episode_frames,
        start_frame=args.start_frame,
        max_failures=args.max_failures,
        room_ttl_s=args.room_ttl,
        stress=args.stress,
        progress=None if args.verbose else progress,
        trace=print if args.verbose else None,
    )
    stats = result.stats
    print(
        f"frames {result.frames:,} in {result.seconds:.1f} s: {result.frames_per_second:,.0f} frames/s; "
        f"{stats.events:,} core events, {stats.messages_out:,} messages out checked, "
        f"{stats.views_checked:,} boards checked, {stats.replays_checked:,} racer/log comparisons "
        f"({stats.full_replays:,} full engine.replay)"
    )
    interesting = (
        "in:",
        "decode:",
        "frames:",
        "error:",
        "note:race",
        "note:blocked_check",
        "fault:",
        "frame_too_big",
        "restarts",
        "rooms_loaded",
        "ticks",
        "disconnects",
        "moves_answered",
        "appends_gone",
        "note:room_gone",
    )
    for key in sorted(k for k in stats.counts if k.startswith(interesting)):
        print(f"  {key:<32} {stats.counts[key]:>10,}")
    for failure in result.failures:
        print()
        print(failure.describe())
    print(f"\n{len(result.failures)} failure(s)")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "seed": args.seed,
                    "stress": args.stress,
                    "room_ttl": args.room_ttl,
                    "start_frame": args.start_frame,
                    "frames": result.frames,
                    "seconds": round(result.seconds, 2),
                    "frames_per_second": round(result.frames_per_second, 1),
                    "events": stats.events,
                    "messages_out": stats.messages_out,
                    "views_checked": stats.views_checked,
                    "replays_checked": stats.replays_checked,
                    "full_replays": stats.full_replays,
                    "counts": dict(sorted(stats.counts.items())),
                    "failures": [f.describe() for f in result.failures],
                    "machine": machine(),
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=1,
            )
            + "\n"
        )
    return 1 if result.failures else 0


def machine() -> str:
    return f"{os.cpu_count()} cores ({cpu_name()}), Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
