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
import math
import os
import signal
import ssl
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from server.core import CoreConfig
from server.limits import ANSWER_BURST_S, LimitsConfig
from server.probes import ProbeConfig, parse_networks
from server.proxy import TrustedProxies
from server.shell import RaceServer, ServerConfig, log_event, run_server
from server.store.base import Store
from server.store.urls import shown_url
from server.supervisor import supervise
from server.web import WebConfig, WebServer
from server.web.api import DailyApi
from server.web.site import check_public_ws_url
from server.winnable import (
    DEFAULT_BLOCKED_QUEUE,
    DEFAULT_BLOCKED_WORKERS,
    DEFAULT_BUDGET,
    DEFAULT_QUEUE,
    DEFAULT_TRIES,
    DEFAULT_WORKERS,
    WinnableConfig,
)

DEFAULT_WRITE_LIMIT = ServerConfig().write_hard_limit
DEFAULT_BUSY_TURN_MOVES = ServerConfig().busy_turn_moves
DEFAULT_BUSY_TURN_STREAK = ServerConfig().busy_turn_streak

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


class ConfigError(ValueError):
    """A flag or environment variable plot-server cannot use: one line for stderr, then exit 2."""


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


@dataclass(frozen=True)
class Number:
    """A numeric option: its flag, its environment variable, its type, default and range."""

    dest: str
    flag: str
    env: str
    kind: type[int] | type[float]
    default: float | None
    low: float
    high: float | None = None
    low_open: bool = False  # the value must be above ``low`` rather than at least ``low``


NUMBERS: list[Number] = []


def _range(spec: Number) -> str:
    if spec.high is not None:
        return f"{spec.low:g} to {spec.high:g}"
    return f"above {spec.low:g}" if spec.low_open else f"at least {spec.low:g}"


def parse_number(spec: Number, text: str, source: str) -> int | float:
    """``text`` as ``spec``'s type within its range, or a ConfigError naming ``source`` (the flag
    or the variable it came from)."""
    what = "a whole number" if spec.kind is int else "a number"
    try:
        value: int | float = spec.kind(text.strip())
    except ValueError:
        raise ConfigError(f"{source} {text!r}: expected {what} ({_range(spec)})") from None
    if not math.isfinite(value):
        raise ConfigError(f"{source} {text!r}: expected {what} ({_range(spec)})")
    too_low = value <= spec.low if spec.low_open else value < spec.low
    if too_low or (spec.high is not None and value > spec.high):
        raise ConfigError(f"{source} {text!r}: must be {_range(spec)}")
    return value


def resolve_numbers(args: argparse.Namespace) -> None:
    """Turn every numeric option into its value, in place: the flag if given, else its
    environment variable, else the default. Idempotent. A bad one raises ConfigError."""
    for spec in NUMBERS:
        raw = getattr(args, spec.dest)
        if isinstance(raw, int | float):
            continue
        if raw is not None:
            setattr(args, spec.dest, parse_number(spec, raw, spec.flag))
            continue
        env = _env(spec.env)
        if env is not None:
            setattr(args, spec.dest, parse_number(spec, env, spec.env))
        else:
            setattr(args, spec.dest, spec.default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plot-server",
        description="The Plot race server: rooms, authoritative races, live leaderboards.",
        epilog="Every option also reads an environment variable (shown in brackets); a flag wins over it.",
    )
    add = parser.add_argument
    NUMBERS.clear()
    core = CoreConfig()

    def number(
        flag: str,
        env: str,
        kind: type[int] | type[float],
        default: float | None,
        low: float,
        help: str,
        *,
        high: float | None = None,
        low_open: bool = False,
        metavar: str | None = None,
    ) -> None:
        spec = Number(flag.lstrip("-").replace("-", "_"), flag, env, kind, default, low, high, low_open)
        NUMBERS.append(spec)
        add(flag, default=None, metavar=metavar or ("N" if kind is int else "S"), help=help)

    add("--host", default=_env("PLOT_HOST", "127.0.0.1"), help="address to listen on [PLOT_HOST] (127.0.0.1)")
    number("--port", "PLOT_PORT", int, 8765, 0, "port, 1 to 65535; 0: any free port [PLOT_PORT] (8765)",
           high=65535, metavar="PORT")  # fmt: skip
    add("--redis", default=_env("REDIS_URL"), metavar="URL", help="Redis URL, e.g. redis://127.0.0.1:6379/0, "
        "or redis+cluster://host:port[,host:port...] for a Redis Cluster [REDIS_URL]; without it the embedded "
        "in-memory store is used")  # fmt: skip
    add("--multi-node", action="store_true", default=None, help="share rooms with the other plot-server "
        "nodes on the same Redis or Redis Cluster: any node serves any racer (needs --redis) "
        "[PLOT_MULTI_NODE=1] (off)")  # fmt: skip
    number("--redis-replicas-ack", "PLOT_REDIS_REPLICAS_ACK", int, 0, 0, "acknowledge a move only once this "
           "many Redis replicas hold it (WAIT after each group commit, on its connection; room writes and reads "
           "are confirmed the same way); 0: once the master holds it, the default (an acknowledged move may be lost "
           "if the master dies before its replica has it: docs/cluster.md) [PLOT_REDIS_REPLICAS_ACK] (0)",
           high=16)  # fmt: skip
    number("--workers", "PLOT_WORKERS", int, 1, 1, "server processes sharing the port (SO_REUSEPORT), each a full "
           "node of --multi-node, supervised: one that dies is restarted; more than one needs --redis "
           "[PLOT_WORKERS] (1)", high=256)  # fmt: skip
    # Set by the --workers supervisor on each worker it starts, never by hand.
    add("--worker-slot", type=int, default=None, help=argparse.SUPPRESS)
    add("--worker-count", type=int, default=1, help=argparse.SUPPRESS)
    add("--workers-dir", default=None, help=argparse.SUPPRESS)
    add("--reuse-port", action="store_true", default=None, help="listen with SO_REUSEPORT, so that several "
        "processes share the port (--workers sets it for its own) [PLOT_REUSE_PORT=1] (off)")  # fmt: skip
    add("--log-level", default=_env("PLOT_LOG_LEVEL", "info"), help="debug, info, warning or error "
        "[PLOT_LOG_LEVEL] (info)")  # fmt: skip
    add("--tls-cert", default=_env("PLOT_TLS_CERT"), metavar="PEM", help="serve wss:// with this certificate chain "
        "[PLOT_TLS_CERT]")  # fmt: skip
    add("--tls-key", default=_env("PLOT_TLS_KEY"), metavar="PEM", help="private key for --tls-cert [PLOT_TLS_KEY]")
    number("--max-frame", "PLOT_MAX_FRAME", int, 4096, 256,
           "largest incoming message, bytes [PLOT_MAX_FRAME] (4096)", metavar="BYTES")  # fmt: skip
    number("--rate", "PLOT_RATE", float, 30, 0, "messages per second per connection, pings included "
           "[PLOT_RATE] (30; burst twice that)", low_open=True, metavar="N")  # fmt: skip
    number("--max-queued-moves", "PLOT_MAX_QUEUED_MOVES", int, core.max_queued_moves, 0, "moves a racer may have "
           "waiting behind the one being written (a client sending ahead of its answers); past it a move is "
           f"answered busy with retry_ms={core.queue_retry_ms}; 0: no bound [PLOT_MAX_QUEUED_MOVES] "
           f"({core.max_queued_moves})")  # fmt: skip
    number("--busy-turn-moves", "PLOT_BUSY_TURN_MOVES", int, DEFAULT_BUSY_TURN_MOVES, 0, "moves one turn of the "
           "event loop takes on once --busy-turn-streak turns in a row have had that many (a standing backlog); "
           f"the turn's later moves are answered busy with retry_ms; 0: off, the default (it cost goodput in "
           f"docs/benchmarks.md's overload runs; e.g. 256 turns it on) [PLOT_BUSY_TURN_MOVES] "
           f"({DEFAULT_BUSY_TURN_MOVES})")  # fmt: skip
    number("--busy-turn-streak", "PLOT_BUSY_TURN_STREAK", int, DEFAULT_BUSY_TURN_STREAK, 1, "turns in a row, "
           f"back to back, with --busy-turn-moves moves each before any is refused [PLOT_BUSY_TURN_STREAK] "
           f"({DEFAULT_BUSY_TURN_STREAK})")  # fmt: skip
    number("--max-connections", "PLOT_MAX_CONNECTIONS", int, 2000, 1, "[PLOT_MAX_CONNECTIONS] (2000)")
    number("--max-rooms", "PLOT_MAX_ROOMS", int, 1000, 1, "[PLOT_MAX_ROOMS] (1000)")
    number("--countdown", "PLOT_COUNTDOWN", float, 3, 0,
           "seconds between start and the race [PLOT_COUNTDOWN] (3)")  # fmt: skip
    number("--racer-hz", "PLOT_RACER_HZ", float, 1000 / core.leaderboard_interval_ms, 0.2, "leaderboards per "
           "second at most to a room's racers, each with the rows that changed, 0.2 to 100 [PLOT_RACER_HZ] "
           f"({1000 / core.leaderboard_interval_ms:g})", high=100, metavar="HZ")  # fmt: skip
    number("--spectator-hz", "PLOT_SPECTATOR_HZ", float, 1000 / core.spectator_leaderboard_interval_ms, 0.2,
           "leaderboards per second at most to a room's spectators (plot watch, the web page), the changes "
           "coalesced, on the racers' ticks (so never more often than --racer-hz), 0.2 to 100 "
           f"[PLOT_SPECTATOR_HZ] ({1000 / core.spectator_leaderboard_interval_ms:g})", high=100,
           metavar="HZ")  # fmt: skip
    number("--grace", "PLOT_GRACE", float, 60, 0,
           "seconds a disconnected racer has to come back before forfeiting [PLOT_GRACE] (60)")  # fmt: skip
    number("--day-seconds", "PLOT_DAY_SECONDS", int, core.day_seconds, 10, "the daily deal's day, in seconds "
           "from the Unix epoch (for tests and events; 86400: days begin at 00:00 UTC) [PLOT_DAY_SECONDS] "
           f"({core.day_seconds})", metavar="S")  # fmt: skip
    number("--daily-time-limit", "PLOT_DAILY_TIME_LIMIT", int, core.daily_time_limit_s, 10, "seconds each daily "
           f"attempt may take, from its board [PLOT_DAILY_TIME_LIMIT] ({core.daily_time_limit_s})",
           metavar="S")  # fmt: skip
    number("--room-ttl", "PLOT_ROOM_TTL", float, 24 * 3600, 0,
           "seconds finished rooms (logs, results) are kept [PLOT_ROOM_TTL] (86400)", low_open=True)  # fmt: skip
    number("--winnable-budget", "PLOT_WINNABLE_BUDGET", int, DEFAULT_BUDGET, 1, "winnable-only rooms: the "
           f"solver's budget per candidate deal [PLOT_WINNABLE_BUDGET] ({DEFAULT_BUDGET})",
           metavar="POSITIONS")  # fmt: skip
    number("--winnable-tries", "PLOT_WINNABLE_TRIES", int, DEFAULT_TRIES, 1, "winnable-only rooms: candidate deals "
           f"per search before the host is told none was found [PLOT_WINNABLE_TRIES] ({DEFAULT_TRIES})")  # fmt: skip
    number("--winnable-workers", "PLOT_WINNABLE_WORKERS", int, DEFAULT_WORKERS, 1, "worker processes for those "
           f"searches, started on first use [PLOT_WINNABLE_WORKERS] ({DEFAULT_WORKERS})")  # fmt: skip
    number("--web-port", "PLOT_WEB_PORT", int, None, 0, "serve the spectator page (http://HOST:PORT/watch/CODE) "
           "on this port; 0: no page [PLOT_WEB_PORT] (the game port + 1: 8766)", high=65535,
           metavar="PORT")  # fmt: skip
    add("--web-ws-url", default=_env("PLOT_WEB_WS_URL"), metavar="URL", help="the game WebSocket URL the page "
        "connects to, when browsers reach it under another name (a proxy) [PLOT_WEB_WS_URL]; default: the page's "
        "host name and --port")  # fmt: skip
    web = WebConfig()
    number("--web-conns-per-address", "PLOT_WEB_CONNS_PER_ADDRESS", int, web.conns_per_address, 0, "open "
           "connections to the page's port per address; past it: 429; 0: no cap [PLOT_WEB_CONNS_PER_ADDRESS] "
           f"({web.conns_per_address})")  # fmt: skip
    number("--web-head-timeout", "PLOT_WEB_HEAD_TIMEOUT", float, web.head_timeout_s, 0, "seconds a page "
           f"connection has to send its whole request head; then 408 [PLOT_WEB_HEAD_TIMEOUT] ({web.head_timeout_s:g})",
           low_open=True)  # fmt: skip
    number("--winnable-queue", "PLOT_WINNABLE_QUEUE", int, DEFAULT_QUEUE, 1, "winnable-only rooms: searches "
           "waiting for a worker, one per room; past it a start is refused with server_busy "
           f"[PLOT_WINNABLE_QUEUE] ({DEFAULT_QUEUE})")  # fmt: skip
    number("--blocked-workers", "PLOT_BLOCKED_WORKERS", int, DEFAULT_BLOCKED_WORKERS, 1, "worker processes for "
           "the exact blocked checks, apart from the searches' "
           f"[PLOT_BLOCKED_WORKERS] ({DEFAULT_BLOCKED_WORKERS})")  # fmt: skip
    number("--blocked-queue", "PLOT_BLOCKED_QUEUE", int, DEFAULT_BLOCKED_QUEUE, 1, "exact blocked checks in "
           "flight; past it a check is answered 'unknown' and asked again on the racer's next move "
           f"[PLOT_BLOCKED_QUEUE] ({DEFAULT_BLOCKED_QUEUE})")  # fmt: skip
    limits = LimitsConfig()
    number("--hello-timeout", "PLOT_HELLO_TIMEOUT", float, limits.hello_timeout_s, 0, "seconds a new connection "
           f"has to send hello before it is closed (1008) [PLOT_HELLO_TIMEOUT] ({limits.hello_timeout_s:g})",
           low_open=True)  # fmt: skip
    number("--max-conns-per-address", "PLOT_MAX_CONNS_PER_ADDRESS", int, limits.conns_per_address, 0,
           "open connections per client address (IPv6: per /64); past it the upgrade is refused with HTTP 429; "
           f"0: no cap [PLOT_MAX_CONNS_PER_ADDRESS] ({limits.conns_per_address})")  # fmt: skip
    number("--hellos-per-minute", "PLOT_HELLOS_PER_MINUTE", int, limits.hellos_per_minute, 0, "hellos per "
           "address and minute (bursts of as many); past it: error rate_limited with retry_ms; 0: no cap "
           f"[PLOT_HELLOS_PER_MINUTE] ({limits.hellos_per_minute})")  # fmt: skip
    number("--rooms-per-minute", "PLOT_ROOMS_PER_MINUTE", int, limits.rooms_per_minute, 0, "rooms created per "
           f"address and minute; 0: no cap [PLOT_ROOMS_PER_MINUTE] ({limits.rooms_per_minute})")  # fmt: skip
    number("--join-failures-per-minute", "PLOT_JOIN_FAILURES_PER_MINUTE", int, limits.join_failures_per_minute, 0,
           "joins of rooms that do not exist per address and minute, then joins wait (against guessing "
           "private codes); 0: no cap "
           f"[PLOT_JOIN_FAILURES_PER_MINUTE] ({limits.join_failures_per_minute})")  # fmt: skip
    number("--claims-per-hour", "PLOT_CLAIMS_PER_HOUR", int, limits.claims_per_hour, 0, "name claims per "
           f"address and hour (docs/players.md); past it: error claim_limit; 0: no cap "
           f"[PLOT_CLAIMS_PER_HOUR] ({limits.claims_per_hour})")  # fmt: skip
    number("--answer-bytes-per-s", "PLOT_ANSWER_BYTES_PER_S", int, limits.answer_bytes_per_s, 0, "bytes a second "
           "the server sends in answer to one connection's requests (join, sync, list_rooms, ...; moves not "
           f"counted), bursts of {ANSWER_BURST_S:g} s' worth; past it: error rate_limited with retry_ms; 0: no "
           f"budget [PLOT_ANSWER_BYTES_PER_S] ({limits.answer_bytes_per_s})", metavar="BYTES")  # fmt: skip
    number("--answer-bytes-per-address", "PLOT_ANSWER_BYTES_PER_ADDRESS", int, limits.address_answer_bytes_per_s, 0,
           "the same for all of one address's connections together; 0: no budget "
           f"[PLOT_ANSWER_BYTES_PER_ADDRESS] ({limits.address_answer_bytes_per_s})", metavar="BYTES")  # fmt: skip
    add("--trusted-proxy", default=_env("PLOT_TRUSTED_PROXY", ""), metavar="CIDR,...", help="balancers whose "
        "PROXY protocol header (v1 or v2, e.g. HAProxy's send-proxy-v2) names the client, on the game and web "
        "ports: addresses or networks, comma-separated; the per-address limits then count each client, not "
        "the balancer. A PROXY header from any other address is refused; a trusted one that sends none is "
        "taken at its own address. Not with --tls-cert (end TLS at the balancer) [PLOT_TRUSTED_PROXY] "
        "(none)")  # fmt: skip
    number("--max-write-buffer", "PLOT_MAX_WRITE_BUFFER", int, DEFAULT_WRITE_LIMIT, 65536, "bytes waiting to be "
           "sent to one connection before it is cut as too slow, checked every second "
           f"[PLOT_MAX_WRITE_BUFFER] ({DEFAULT_WRITE_LIMIT})", metavar="BYTES")  # fmt: skip
    add("--metrics", default=_env("PLOT_METRICS", "on"), metavar="on|off", help="GET /metrics on the metrics "
        "listener, in the Prometheus text format [PLOT_METRICS] (on)")  # fmt: skip
    number("--metrics-port", "PLOT_METRICS_PORT", int, None, 0, "the metrics listener's port: GET /metrics and a "
           "detailed GET /healthz (store address, pid, node), never on the game port; 0: no listener "
           "[PLOT_METRICS_PORT] (the game port + 2: 8767)", high=65535, metavar="PORT")  # fmt: skip
    add("--metrics-host", default=_env("PLOT_METRICS_HOST", "127.0.0.1"), metavar="ADDRESS", help="address the "
        "metrics listener listens on [PLOT_METRICS_HOST] (127.0.0.1)")  # fmt: skip
    add("--metrics-allow", default=_env("PLOT_METRICS_ALLOW", "loopback"), metavar="NETS", help="comma-separated "
        "addresses or networks (10.0.0.0/8, ::1, loopback) the metrics listener answers; others get 403 "
        "[PLOT_METRICS_ALLOW] (loopback)")  # fmt: skip
    number("--probe-rate", "PLOT_PROBE_RATE", float, ProbeConfig().probe_rate, 0, "GET /healthz and /metrics per "
           "second per client address, on each port (bursts of twice that); past it HTTP 429; 0: no limit "
           f"[PLOT_PROBE_RATE] ({ProbeConfig().probe_rate:g})")  # fmt: skip
    add("--readback", default=_env("PLOT_READBACK", "incremental"), metavar="incremental|full",
        help="--multi-node: read a room back after another node's change from the log entries this node "
        "lacks, or whole (for measuring) [PLOT_READBACK] (incremental)")  # fmt: skip
    return parser


LOG_LEVELS = ("debug", "info", "warning", "error")
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def check_redis_url(url: str) -> str:
    """A URL redis-py can use, or a ConfigError saying what one looks like."""
    parts = urlsplit(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise ConfigError(
            f"--redis / REDIS_URL {shown_url(url)!r}: expected redis://host:port/db, rediss://, unix:///path "
            "or redis+cluster://host:port[,host:port...]"
        )
    if parts.scheme.endswith("+cluster"):  # one or more seeds, host:port,host:port
        from server.store.redis import split_cluster_url  # only a Redis deployment needs redis-py

        try:
            split_cluster_url(url)
        except ValueError as error:
            raise ConfigError(f"--redis / REDIS_URL: {error} in the {parts.scheme}:// URL") from None
        return url
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme != "unix" and (not parts.hostname or port == -1 or port == 0):
        raise ConfigError(f"--redis / REDIS_URL: no usable host and port in {parts.scheme}:// URL")
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError("--redis / REDIS_URL: a unix:// URL needs the socket's path (unix:///path/redis.sock)")
    return url


def _switch(flag: bool | None, env: str) -> bool:
    """A store_true flag, else its environment variable (1/0, true/false, yes/no, on/off)."""
    if flag:
        return True
    text = (_env(env) or "0").strip().lower()
    if text not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise ConfigError(f"{env}={text!r}: expected 1 or 0")
    return text in ("1", "true", "yes", "on")


def check_workers(args: argparse.Namespace) -> None:
    """More than one worker shares rooms through Redis (one Redis or a cluster), on one fixed port."""
    if args.workers == 1:
        return
    if not args.redis:
        raise ConfigError(
            f"--workers / PLOT_WORKERS {args.workers}: more than one worker needs --redis URL (the workers "
            "share their rooms through Redis; the in-memory store is one process's own)"
        )
    if args.port == 0:
        raise ConfigError(f"--workers / PLOT_WORKERS {args.workers}: the workers share one port: give --port")


def multi_node(args: argparse.Namespace) -> bool:
    """--multi-node, else PLOT_MULTI_NODE (1/0, true/false, yes/no, on/off); checked against --redis.
    Several workers are several nodes."""
    wanted = _switch(args.multi_node, "PLOT_MULTI_NODE") or args.workers > 1
    if wanted and not args.redis:
        raise ConfigError("--multi-node needs --redis URL: the nodes share their rooms through Redis")
    return wanted


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The server's configuration from parsed arguments; ConfigError on any bad value."""
    resolve_numbers(args)
    if args.log_level not in LOG_LEVELS:
        raise ConfigError(f"--log-level / PLOT_LOG_LEVEL {args.log_level!r}: expected one of {', '.join(LOG_LEVELS)}")
    if args.metrics not in ("on", "off"):
        raise ConfigError(f"--metrics / PLOT_METRICS {args.metrics!r}: expected on or off")
    if args.readback not in ("incremental", "full"):
        raise ConfigError(f"--readback / PLOT_READBACK {args.readback!r}: expected incremental or full")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    for flag, path in (("--tls-cert / PLOT_TLS_CERT", args.tls_cert), ("--tls-key / PLOT_TLS_KEY", args.tls_key)):
        if path and not os.path.isfile(path):
            raise ConfigError(f"{flag} {path!r}: no such file")
    try:
        trusted_proxies = TrustedProxies.parse(args.trusted_proxy or "")
    except ValueError as exc:
        raise ConfigError(f"--trusted-proxy / PLOT_TRUSTED_PROXY: {exc}") from None
    if trusted_proxies and args.tls_cert:
        # The PROXY header comes before TLS would start: end TLS at the balancer instead.
        raise ConfigError("--trusted-proxy does not go with --tls-cert: let the balancer end TLS")
    if args.redis:
        check_redis_url(args.redis)
    check_workers(args)
    if args.redis_replicas_ack and not args.redis:
        raise ConfigError("--redis-replicas-ack needs --redis URL: the in-memory store has no replicas")
    winnable = WinnableConfig(
        budget=args.winnable_budget,
        tries=args.winnable_tries,
        workers=args.winnable_workers,
        queue=args.winnable_queue,
        blocked_workers=args.blocked_workers,
        blocked_queue=args.blocked_queue,
    )
    core = CoreConfig(
        countdown_ms=int(args.countdown * 1000),
        grace_ms=int(args.grace * 1000),
        leaderboard_interval_ms=round(1000 / args.racer_hz),
        spectator_leaderboard_interval_ms=round(1000 / args.spectator_hz),
        max_rooms=args.max_rooms,
        room_ttl_s=args.room_ttl,
        max_queued_moves=args.max_queued_moves,
        day_seconds=args.day_seconds,
        daily_time_limit_s=args.daily_time_limit,
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
        write_hard_limit=args.max_write_buffer,
        busy_turn_moves=args.busy_turn_moves,
        busy_turn_streak=args.busy_turn_streak,
        limits=LimitsConfig(
            hello_timeout_s=args.hello_timeout,
            conns_per_address=args.max_conns_per_address,
            hellos_per_minute=args.hellos_per_minute,
            rooms_per_minute=args.rooms_per_minute,
            join_failures_per_minute=args.join_failures_per_minute,
            claims_per_hour=args.claims_per_hour,
            answer_bytes_per_s=args.answer_bytes_per_s,
            address_answer_bytes_per_s=args.answer_bytes_per_address,
            trusted_proxies=trusted_proxies,
        ),
        core=core,
        winnable=winnable,
        metrics=args.metrics == "on",
        probes=probe_config(args),
        readback=args.readback,
        reuse_port=_switch(args.reuse_port, "PLOT_REUSE_PORT") or args.workers > 1,
        worker_slot=args.worker_slot,
        worker_count=args.worker_count,
        workers_dir=args.workers_dir,
    )


def probe_config(args: argparse.Namespace) -> ProbeConfig:
    """The metrics listener (by default on the game port + 2; none when the game port is 0: any
    free port) and the probes' rate."""
    port = args.metrics_port if args.metrics_port is not None else (args.port + 2 if args.port else 0)
    if port > 65535:
        raise ConfigError(f"--metrics-port / PLOT_METRICS_PORT: the game port + 2 is {port}: give --metrics-port")
    try:
        allow = parse_networks(args.metrics_allow)
    except ValueError as exc:
        raise ConfigError(f"--metrics-allow / PLOT_METRICS_ALLOW: {exc}") from None
    return ProbeConfig(
        metrics_host=args.metrics_host, metrics_port=port or None, metrics_allow=allow, probe_rate=args.probe_rate
    )


def make_store(redis_url: str | None, replicas_ack: int = 0) -> tuple[Store, str]:
    if redis_url:
        from server.store.redis import RedisStore  # only a Redis deployment needs redis-py

        try:
            return RedisStore(redis_url, replicas_ack=replicas_ack), f"redis {shown_url(redis_url)}"
        except ValueError as exc:  # redis-py refused the URL
            raise ConfigError(f"--redis / REDIS_URL: {exc}") from None
    from server.store.memory import MemoryStore

    return MemoryStore(), "memory"


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("websockets").setLevel(max(logging.WARNING, root.level))


async def serve(args: argparse.Namespace, config: ServerConfig) -> int:
    store, store_name = make_store(args.redis, args.redis_replicas_ack)
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
    orphan_watch = asyncio.ensure_future(watch_supervisor(stop)) if args.worker_slot is not None else None

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
        if orphan_watch is not None:
            orphan_watch.cancel()
        if web is not None and web_listening:
            await web.stop()
    return 0


async def watch_supervisor(stop: asyncio.Event, every_s: float = 0.5) -> None:
    """A worker of ``--workers`` whose supervisor is gone (killed with SIGKILL, which it cannot pass
    on) stops as on SIGTERM: left running, it would go on holding the shared port beside the next
    supervisor's workers, restarted by no one."""
    supervisor = os.getppid()
    while not stop.is_set():
        await asyncio.sleep(every_s)
        if os.getppid() != supervisor:
            log_event(logging.WARNING, "supervisor_gone", supervisor=supervisor)
            stop.set()


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
            WebConfig(
                host=config.host,
                port=web_port,
                public_ws_url=args.web_ws_url,
                reuse_port=config.reuse_port,
                conns_per_address=args.web_conns_per_address,
                head_timeout_s=args.web_head_timeout,
                trusted_proxies=config.limits.trusted_proxies,
            ),
            game_port=game_port,
            game_tls=bool(config.tls_cert),
            ssl_context=web_ssl,
            api=DailyApi(server.store, day_seconds=config.core.day_seconds),
        )
    except ValueError as exc:
        raise ConfigError(f"--web-ws-url / PLOT_WEB_WS_URL: {exc}") from None


def tune_gc() -> None:
    """Keep the cyclic garbage collector out of the way of acknowledgements.

    With Python's default thresholds a loaded server ran a full collection every few seconds,
    each pausing it for up to ~100 ms of CPU (1,000 racers: about 15% of its CPU in the
    collector; docs/benchmarks.md, "The move path at saturation"). Nearly everything is freed by
    reference counting, so collections can be much rarer; the imported code, which never
    becomes garbage, is frozen out of them."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 after a clean shutdown, 1 when the port cannot be had, 2 on a bad flag or variable
    (one line on stderr, no traceback)."""
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        if args.web_ws_url:
            try:
                check_public_ws_url(args.web_ws_url)
            except ValueError as exc:
                raise ConfigError(f"--web-ws-url / PLOT_WEB_WS_URL: {exc}") from None
        if args.redis:
            make_store(args.redis, args.redis_replicas_ack)  # redis-py's own URL checks (it connects lazily)
    except ConfigError as exc:
        print(f"plot-server: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.log_level)
    if args.workers > 1:
        return supervise(args.workers, list(sys.argv[1:] if argv is None else argv))
    tune_gc()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(args, config))
    return uvloop.run(serve(args, config))


if __name__ == "__main__":
    sys.exit(main())
