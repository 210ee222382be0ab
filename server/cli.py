"""``plot-server``: the race server. Flags, or environment variables (flags win).

With no options it serves on 127.0.0.1:8765 with the embedded in-memory store, which is
enough for a race among friends; ``--redis URL`` (or ``REDIS_URL``) keeps everything in Redis
so a restart loses nothing. SIGTERM/SIGINT: clients are told, connections closed, writes flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import ssl
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from server.app import RaceServer, ServerConfig, log_event, run_server
from server.core import CoreConfig
from server.store.base import Store
from server.web import WebConfig, WebServer
from server.winnable import (
    DEFAULT_BLOCKED_QUEUE,
    DEFAULT_BLOCKED_WORKERS,
    DEFAULT_BUDGET,
    DEFAULT_QUEUE,
    DEFAULT_TRIES,
    DEFAULT_WORKERS,
    WinnableConfig,
)

# Attributes of a LogRecord that are not extra fields.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key != "fields":
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plot-server",
        description="The Plot race server: rooms, authoritative races, live leaderboards.",
        epilog="Every option also reads an environment variable (shown in brackets); a flag wins over it.",
    )
    add = parser.add_argument
    add("--host", default=_env("PLOT_HOST", "127.0.0.1"), help="address to listen on [PLOT_HOST] (127.0.0.1)")
    add("--port", type=int, default=int(_env("PLOT_PORT", "8765") or 8765), help="port [PLOT_PORT] (8765)")
    add("--redis", default=_env("REDIS_URL"), metavar="URL", help="Redis URL, e.g. redis://127.0.0.1:6379/0, "
        "or redis+cluster://host:port for a Redis Cluster [REDIS_URL]; without it the embedded in-memory store "
        "is used")  # fmt: skip
    add("--multi-node", action="store_true", default=None, help="share rooms with the other plot-server "
        "nodes on the same Redis: any node serves any racer (needs --redis; one Redis, not a cluster yet) "
        "[PLOT_MULTI_NODE=1] (off)")  # fmt: skip
    add("--log-level", default=_env("PLOT_LOG_LEVEL", "info"), choices=["debug", "info", "warning", "error"],
        help="[PLOT_LOG_LEVEL] (info)")  # fmt: skip
    add("--tls-cert", default=_env("PLOT_TLS_CERT"), metavar="PEM", help="serve wss:// with this certificate chain "
        "[PLOT_TLS_CERT]")  # fmt: skip
    add("--tls-key", default=_env("PLOT_TLS_KEY"), metavar="PEM", help="private key for --tls-cert [PLOT_TLS_KEY]")
    add("--max-frame", type=int, default=int(_env("PLOT_MAX_FRAME", "4096") or 4096),
        help="largest incoming message, bytes [PLOT_MAX_FRAME] (4096)")  # fmt: skip
    add("--rate", type=float, default=float(_env("PLOT_RATE", "30") or 30),
        help="messages per second per connection [PLOT_RATE] (30; burst twice that)")  # fmt: skip
    add("--max-connections", type=int, default=int(_env("PLOT_MAX_CONNECTIONS", "2000") or 2000),
        help="[PLOT_MAX_CONNECTIONS] (2000)")  # fmt: skip
    add("--max-rooms", type=int, default=int(_env("PLOT_MAX_ROOMS", "1000") or 1000),
        help="[PLOT_MAX_ROOMS] (1000)")  # fmt: skip
    add("--countdown", type=float, default=float(_env("PLOT_COUNTDOWN", "3") or 3),
        help="seconds between start and the race [PLOT_COUNTDOWN] (3)")  # fmt: skip
    add("--grace", type=float, default=float(_env("PLOT_GRACE", "60") or 60),
        help="seconds a disconnected racer has to come back before forfeiting [PLOT_GRACE] (60)")  # fmt: skip
    add("--room-ttl", type=float, default=float(_env("PLOT_ROOM_TTL", str(24 * 3600)) or 86400),
        help="seconds finished rooms (logs, results) are kept [PLOT_ROOM_TTL] (86400)")  # fmt: skip
    add("--winnable-budget", type=int, default=int(_env("PLOT_WINNABLE_BUDGET", str(DEFAULT_BUDGET)) or 0),
        metavar="POSITIONS", help="winnable-only rooms: the solver's budget per candidate deal "
        f"[PLOT_WINNABLE_BUDGET] ({DEFAULT_BUDGET})")  # fmt: skip
    add("--winnable-tries", type=int, default=int(_env("PLOT_WINNABLE_TRIES", str(DEFAULT_TRIES)) or 0),
        metavar="N", help="winnable-only rooms: candidate deals per search before the host is told none was "
        f"found [PLOT_WINNABLE_TRIES] ({DEFAULT_TRIES})")  # fmt: skip
    add("--winnable-workers", type=int, default=int(_env("PLOT_WINNABLE_WORKERS", str(DEFAULT_WORKERS)) or 0),
        metavar="N", help="worker processes for those searches, started on first use "
        f"[PLOT_WINNABLE_WORKERS] ({DEFAULT_WORKERS})")  # fmt: skip
    web_port = _env("PLOT_WEB_PORT")
    add("--web-port", type=int, default=int(web_port) if web_port else None, metavar="PORT",
        help="serve the spectator page (http://HOST:PORT/watch/CODE) on this port; 0: no page "
        "[PLOT_WEB_PORT] (the game port + 1: 8766)")  # fmt: skip
    add("--web-ws-url", default=_env("PLOT_WEB_WS_URL"), metavar="URL", help="the game WebSocket URL the page "
        "connects to, when browsers reach it under another name (a proxy) [PLOT_WEB_WS_URL]; default: the page's "
        "host name and --port")  # fmt: skip
    add("--winnable-queue", type=int, default=int(_env("PLOT_WINNABLE_QUEUE", str(DEFAULT_QUEUE)) or 0),
        metavar="N", help="winnable-only rooms: searches waiting for a worker, one per room; past it a start "
        f"is refused with server_busy [PLOT_WINNABLE_QUEUE] ({DEFAULT_QUEUE})")  # fmt: skip
    add("--blocked-workers", type=int, default=int(_env("PLOT_BLOCKED_WORKERS", str(DEFAULT_BLOCKED_WORKERS)) or 0),
        metavar="N", help="worker processes for the exact blocked checks, apart from the searches' "
        f"[PLOT_BLOCKED_WORKERS] ({DEFAULT_BLOCKED_WORKERS})")  # fmt: skip
    add("--blocked-queue", type=int, default=int(_env("PLOT_BLOCKED_QUEUE", str(DEFAULT_BLOCKED_QUEUE)) or 0),
        metavar="N", help="exact blocked checks in flight; past it a check is answered 'unknown' and asked "
        f"again on the racer's next move [PLOT_BLOCKED_QUEUE] ({DEFAULT_BLOCKED_QUEUE})")  # fmt: skip
    add("--metrics", default=_env("PLOT_METRICS", "on"), metavar="on|off", help="GET /metrics on the game port, "
        "in the Prometheus text format [PLOT_METRICS] (on)")  # fmt: skip
    return parser


def usage_error(message: str) -> NoReturn:
    """A bad flag or environment variable: one line, exit 2."""
    print(f"plot-server: {message}", file=sys.stderr)
    raise SystemExit(2)


def multi_node(args: argparse.Namespace) -> bool:
    """--multi-node, else PLOT_MULTI_NODE (1/0, true/false, yes/no, on/off); checked against --redis."""
    if args.multi_node:
        wanted = True
    else:
        text = (_env("PLOT_MULTI_NODE") or "0").strip().lower()
        if text not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            usage_error(f"PLOT_MULTI_NODE={text!r}: expected 1 or 0")
        wanted = text in ("1", "true", "yes", "on")
    if wanted and not args.redis:
        usage_error("--multi-node needs --redis URL: the nodes share their rooms through one Redis")
    if wanted and "+cluster://" in args.redis:
        usage_error("--multi-node runs on one Redis (redis://, rediss://, unix://); not on a Redis Cluster yet")
    return wanted


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    if args.metrics not in ("on", "off"):
        print(f"plot-server: --metrics {args.metrics!r}: expected on or off (PLOT_METRICS too)", file=sys.stderr)
        raise SystemExit(2)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("plot-server: --tls-cert and --tls-key go together")
    winnable = WinnableConfig(
        budget=args.winnable_budget,
        tries=args.winnable_tries,
        workers=args.winnable_workers,
        queue=args.winnable_queue,
        blocked_workers=args.blocked_workers,
        blocked_queue=args.blocked_queue,
    )
    solver_limits = {
        "--winnable-budget": winnable.budget,
        "--winnable-tries": winnable.tries,
        "--winnable-workers": winnable.workers,
        "--winnable-queue": winnable.queue,
        "--blocked-workers": winnable.blocked_workers,
        "--blocked-queue": winnable.blocked_queue,
    }
    too_small = [f"{flag} {value}" for flag, value in solver_limits.items() if value < 1]
    if too_small:
        raise SystemExit(f"plot-server: {', '.join(too_small)}: each must be at least 1")
    core = CoreConfig(
        countdown_ms=int(args.countdown * 1000),
        grace_ms=int(args.grace * 1000),
        max_rooms=args.max_rooms,
        room_ttl_s=args.room_ttl,
        shared_rooms=multi_node(args),
    )
    return ServerConfig(
        host=args.host,
        port=args.port,
        max_frame=args.max_frame,
        rate_per_s=args.rate,
        burst=max(1, int(args.rate * 2)),
        max_connections=args.max_connections,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        core=core,
        winnable=winnable,
        metrics=args.metrics == "on",
    )


def make_store(redis_url: str | None) -> tuple[Store, str]:
    if redis_url:
        from server.store.redis import RedisStore, redact_url  # only a Redis deployment needs redis-py

        return RedisStore(redis_url), f"redis {redact_url(redis_url)}"
    from server.store.memory import MemoryStore

    return MemoryStore(), "memory"


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("websockets").setLevel(max(logging.WARNING, root.level))


async def serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    store, store_name = make_store(args.redis)
    server = RaceServer(store, config, store_name=store_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        log_event(logging.INFO, "signal", signal=sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # elsewhere Ctrl-C still raises
            loop.add_signal_handler(sig, on_signal, sig)
    web = make_web_server(args, config, server)
    web_listening = False

    async def start_web() -> None:
        nonlocal web_listening
        if web is None:
            return
        try:
            await web.start()
            web_listening = True
        except OSError as exc:  # the races matter more than the page: serve them anyway
            log_event(logging.WARNING, "web_cannot_listen", host=config.host, port=web.config.port, error=str(exc))

    try:
        await run_server(server, stop, after_start=start_web)
    except OSError as exc:
        log_event(logging.ERROR, "cannot_listen", host=config.host, port=config.port, error=str(exc))
        return 1
    finally:
        if web is not None and web_listening:
            await web.stop()
    return 0


def make_web_server(args: argparse.Namespace, config: ServerConfig, server: RaceServer) -> WebServer | None:
    """The spectator page's own HTTP server (docs/web.md), or None with --web-port 0. By default
    it listens on the game port + 1 (none when the game port is 0: any free port)."""
    web_port = args.web_port if args.web_port is not None else (config.port + 1 if config.port else 0)
    if web_port == 0:
        return None

    def game_port() -> int:
        try:
            return server.port
        except (AssertionError, RuntimeError):  # not listening (any more): the configured one
            return config.port

    web_ssl: ssl.SSLContext | None = None
    if config.tls_cert:  # the page is served over https when the game port speaks wss
        web_ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        web_ssl.load_cert_chain(config.tls_cert, config.tls_key)
    try:
        return WebServer(
            WebConfig(host=config.host, port=web_port, public_ws_url=args.web_ws_url),
            game_port=game_port,
            game_tls=bool(config.tls_cert),
            ssl_context=web_ssl,
        )
    except ValueError as exc:
        raise SystemExit(f"plot-server: {exc} (--web-ws-url)") from None


def tune_gc() -> None:
    """Keep the cyclic garbage collector out of the way of acknowledgements.

    With Python's default thresholds a loaded server ran a full collection every few seconds,
    each pausing it for up to ~100 ms of CPU (1,000 racers: about 15% of its CPU in the
    collector; docs/benchmarks.md, Load). Nearly everything is freed by reference counting, so
    collections can be much rarer; the imported code, which never becomes garbage, is frozen
    out of them."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    tune_gc()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
