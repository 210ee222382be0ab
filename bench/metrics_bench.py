"""What /metrics adds to a move, measured in isolation (docs/benchmarks.md, "Metrics").

The load benchmark (``bench/run_load.py metrics``) compares whole servers with metrics on and
off, but on a shared machine its run-to-run noise (±15%) is larger than the cost. This times
the very calls the server makes per move when metrics are on, in one process, with no I/O:

- receipt: ``time.perf_counter()`` and the move id stored on the connection;
- acknowledgement: the id looked up on the racer's connection, ``Metrics.accepted`` (a counter
  and a histogram observation);
- store: ``Metrics.store_call`` (a counter and an observation), once per batch on Redis (a
  batch holds one move at light load, dozens under load: the per-move share is at most this);
- scrape: ``Metrics.render`` with 1,000 connections and 100 rooms behind the snapshot.

    python bench/metrics_bench.py [--repeat 7] [--number 200000]

Medians of ``--repeat`` timings of ``--number`` calls each; JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from collections.abc import Callable

from server.metrics import Metrics, Snapshot


def per_call_us(stmt: Callable[[], object], repeat: int, number: int) -> float:
    timings = timeit.repeat(stmt, repeat=repeat, number=number)
    return round(statistics.median(timings) / number * 1e6, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=200_000)
    opts = parser.parse_args()
    snapshot = Snapshot(
        connections={"anonymous": 0, "lobby": 0, "racer": 800, "spectator": 200},
        rooms={"lobby": 10, "dealing": 0, "countdown": 0, "racing": 80, "results": 10},
        queues={"move_writes": 12, "room_writes": 3, "player_writes": 0, "solver_waiting": 0},
    )
    metrics = Metrics(lambda: snapshot)
    moves_in: dict[int, float] = {}
    counter = iter(range(10**12))

    def receipt() -> None:
        moves_in[next(counter) & 1023] = time.perf_counter()

    def acknowledgement() -> None:
        received = moves_in.pop(7, None)
        metrics.accepted(None if received is None else time.perf_counter() - received, False)

    def store_call() -> None:
        metrics.store_call("append_moves", 0.0012, False)

    def nothing() -> None:
        pass

    out: dict[str, object] = {
        "python": sys.version.split()[0],
        "command": "python bench/metrics_bench.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repeat": opts.repeat,
        "number": opts.number,
    }
    baseline = per_call_us(nothing, opts.repeat, opts.number)  # the call itself, subtracted below
    costs = {
        "receipt_us": per_call_us(receipt, opts.repeat, opts.number),
        "acknowledgement_us": per_call_us(acknowledgement, opts.repeat, opts.number),
        "store_call_us": per_call_us(store_call, opts.repeat, opts.number),
    }
    out["empty_call_us"] = baseline
    out.update({name: round(value - baseline, 3) for name, value in costs.items()})
    out["per_move_us_at_most"] = round(sum(costs.values()) - 3 * baseline, 3)
    out["render_ms"] = round(per_call_us(metrics.render, opts.repeat, max(1, opts.number // 1000)) / 1000, 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
