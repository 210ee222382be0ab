// The benchmark's peer (bench/peer/README.md): a Colyseus room server on the connection pattern
// plot-server serves on the home-undo workload. Rooms of 8 racers; each racer's "move" message is
// validated (a card from the waste or a tableau pile to a foundation, or the undo of the racer's last
// such move), the room's state is updated (the racer's cards home and moves), the move is
// acknowledged at once ("move_ok" with the id and the racer's sequence number), and the state's
// patches go to the room at Colyseus's default patch rate (50 ms). Nothing is stored.
//
//     node bench/peer/server.js --port 2567
"use strict";

const { Server, Room } = require("@colyseus/core");
const { WebSocketTransport } = require("@colyseus/ws-transport");
const { schema, t } = require("@colyseus/schema");

const Racer = schema({ name: t.string(), cards: t.number(), moves: t.number(), status: t.string() });
const RaceState = schema({ racers: t.map(Racer) });

const MOVE = /^(waste|t[0-6])>f[0-3]$/;

class RaceRoom extends Room {
  maxClients = 8;

  onCreate() {
    this.state = new RaceState();
    this.onMessage("move", (client, message) => this.move(client, message));
  }

  onJoin(client, options) {
    const racer = new Racer();
    racer.name = String((options && options.name) || client.sessionId).slice(0, 24);
    racer.cards = 0;
    racer.moves = 0;
    racer.status = "playing";
    this.state.racers.set(client.sessionId, racer);
    client.userData = { seq: 0, last: null };
  }

  onLeave(client) {
    this.state.racers.delete(client.sessionId);
  }

  move(client, message) {
    const id = message && message.id;
    const move = message && message.move;
    const mine = client.userData;
    const racer = this.state.racers.get(client.sessionId);
    if (!Number.isInteger(id) || typeof move !== "string" || racer === undefined) {
      client.send("move_rejected", { id, code: "bad_move" });
      return;
    }
    if (move === "undo") {
      if (mine.last === null) {
        client.send("move_rejected", { id, code: "nothing_to_undo" });
        return;
      }
      mine.last = null;
      racer.cards -= 1;
    } else if (MOVE.test(move) && racer.cards < 52) {
      mine.last = move;
      racer.cards += 1;
    } else {
      client.send("move_rejected", { id, code: "illegal_move" });
      return;
    }
    racer.moves += 1;
    mine.seq += 1;
    client.send("move_ok", { id, seq: mine.seq });
  }
}

async function main() {
  const at = process.argv.indexOf("--port");
  const port = at > 0 ? Number(process.argv[at + 1]) : 2567;
  const server = new Server({ transport: new WebSocketTransport(), greet: false, gracefullyShutdown: false });
  server.define("race", RaceRoom);
  await server.listen(port, "127.0.0.1");
  process.on("SIGINT", () => process.exit(0));
  process.on("SIGTERM", () => process.exit(0));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
