// The peer's load generator (bench/peer/README.md): racers in rooms of 8 through @colyseus/sdk, each
// with one move in flight, alternating a card sent home ("waste>f0") and its undo, as fast as
// acknowledgements return (--pace 0) or on a fixed grid of --pace moves a second. Prints one JSON
// object on stdout with the fields bench/loadgen.py prints (moves_per_second, accepted_moves,
// ack_latency_ms, ...); "window-start" and "window-end" on stderr mark the measured window, which
// bench/run_load.py samples the server's CPU at. Other flags bench/loadgen.py takes are ignored.
//
//     node bench/peer/loadgen.js --url ws://127.0.0.1:2567 --racers 64 --pace 0 --duration 10 --warmup 3
"use strict";

const { Client } = require("@colyseus/sdk");

function options(argv) {
  const out = { url: "ws://127.0.0.1:2567", racers: 64, pace: 0, duration: 10, warmup: 3, roomSize: 8 };
  const names = { "--url": "url", "--racers": "racers", "--pace": "pace", "--duration": "duration",
    "--warmup": "warmup", "--room-size": "roomSize" };
  for (let i = 2; i < argv.length; i++) {
    const key = names[argv[i]];
    if (key !== undefined) {
      out[key] = key === "url" ? argv[i + 1] : Number(argv[i + 1]);
      i++;
    }
  }
  const host = new URL(out.url.replace(/^ws/, "http")).hostname;
  if (!["127.0.0.1", "localhost", "::1", "[::1]"].includes(host)) {
    throw new Error(`loopback addresses only, not ${host}`);
  }
  return out;
}

function percentile(sorted, q) {
  if (sorted.length === 0) return null;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.round((q / 100) * (sorted.length - 1))));
  return Math.round(sorted[index] * 1000) / 1000;
}

function summaryMs(values) {
  const sorted = Float64Array.from(values).sort();
  return {
    count: values.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    "p99.9": percentile(sorted, 99.9),
    max: sorted.length ? Math.round(sorted[sorted.length - 1] * 1000) / 1000 : null,
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => performance.now(); // ms

async function main() {
  const opts = options(process.argv);
  const stats = { acks: 0, rejected: 0, errors: 0, failures: [], latency: [], skipped: 0, sent: 0, patches: 0 };
  let measuring = false;
  let running = true;
  const client = new Client(opts.url);
  const setupStarted = now();
  const rooms = [];
  for (let i = 0; i < opts.racers; i++) {
    // one at a time: joinOrCreate fills each room of 8 before the next (maxClients locks it)
    rooms.push(await client.joinOrCreate("race", { name: `peer-${i}` }));
  }
  const setupSeconds = (now() - setupStarted) / 1000;
  const interval = opts.pace > 0 ? 1000 / opts.pace : 0;

  function racer(room) {
    return new Promise((resolve) => {
      let id = 0;
      let sentAt = 0;
      let home = false;
      let next = now() + Math.random() * interval - interval; // the first slot: within one interval
      room.onStateChange(() => {
        if (measuring) stats.patches += 1;
      });
      const send = () => {
        if (!running) return resolve();
        id += 1;
        home = !home;
        sentAt = now();
        if (measuring) stats.sent += 1;
        room.send("move", { id, move: home ? "waste>f0" : "undo" });
      };
      const schedule = () => {
        if (!running) return resolve();
        if (!interval) return send();
        // the next slot on the grid; slots that passed while the answer was awaited are skipped
        const t = now();
        next += interval;
        if (next < t) {
          const missed = Math.ceil((t - next) / interval);
          if (measuring) stats.skipped += missed;
          next += missed * interval;
        }
        setTimeout(send, next - t);
      };
      room.onMessage("move_ok", (message) => {
        if (message.id !== id) return;
        if (measuring) {
          stats.acks += 1;
          stats.latency.push(now() - sentAt);
        }
        schedule();
      });
      room.onMessage("move_rejected", (message) => {
        if (measuring) stats.rejected += 1;
        if (message.id === id) {
          home = false; // start again from a card sent home
          schedule();
        }
      });
      room.onError((code, message) => {
        stats.errors += 1;
        stats.failures.push(`${code} ${message}`);
      });
      schedule();
    });
  }

  const tasks = rooms.map(racer);
  await sleep(opts.warmup * 1000);
  measuring = true;
  process.stderr.write("window-start\n");
  const cpu0 = process.cpuUsage();
  const t0 = now();
  await sleep(opts.duration * 1000);
  const windowSeconds = (now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  measuring = false;
  process.stderr.write("window-end\n");
  running = false;
  await Promise.race([Promise.all(tasks), sleep(2000)]);
  for (const room of rooms) room.leave().catch(() => {});
  const result = {
    mode: "peer",
    racers: opts.racers,
    room_size: opts.roomSize,
    pace: opts.pace,
    workload: "home-undo",
    setup_seconds: Math.round(setupSeconds * 100) / 100,
    window_seconds: Math.round(windowSeconds * 100) / 100,
    moves_per_second: Math.round((stats.acks / windowSeconds) * 10) / 10,
    accepted_moves: stats.acks,
    rejected: stats.rejected,
    errors: stats.errors,
    failures: stats.failures.slice(0, 5),
    moves_sent: stats.sent,
    sends_skipped: stats.skipped,
    state_patches_per_move: stats.acks ? Math.round((stats.patches / stats.acks) * 1000) / 1000 : null,
    ack_latency_ms: summaryMs(stats.latency),
    generator_cpu_share: Math.round(((cpu.user + cpu.system) / 1e6 / windowSeconds) * 1000) / 1000,
    generator_peak_rss_mib: Math.round((process.resourceUsage().maxRSS / 1024) * 10) / 10,
  };
  process.stdout.write(JSON.stringify(result) + "\n");
  process.exit(0);
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
