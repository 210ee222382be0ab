"""The limits a public server needs against one abusive address (docs/reliability.md, Limits).

Per connection, the shell's gate (server/shell/gate.py) already has a message rate (a token bucket that
WebSocket pings and pongs count in too) and a write-buffer cap. This module adds what is
counted per *address*: how many connections it holds at once, how many hellos and room
creations it may send per minute, and how many joins of rooms that do not exist it may make
(a budget that makes guessing a private room's code impractical). Plus the hello deadline.

An address is the client's: behind a balancer, the one its PROXY header names when the balancer
is a trusted proxy (``trusted_proxies``, server/proxy.py), else the socket's peer.

Every per-minute budget is a token bucket: ``N`` at once, refilled at ``N`` per minute. An
address is an IPv4 address, or an IPv6 /64 (one customer's usual allocation); connections
from a Unix socket or of unknown origin share one key. Entries that are full and hold no
connection are forgotten, so a flood of addresses does not grow memory for ever.

And what a connection may make the server *send* (``AnswerBudgets``): the bytes written, to
anyone, while the server handles one of that connection's requests (a join's snapshot, a sync,
a room list, a lobby change told to every member), from a budget per connection and one per
address. Moves are not counted (the game's own traffic, bounded by the message rate and the
racer's queue), nor chat lines (bounded by their own rates: docs/protocol.md §3.4), nor what
others' requests and moves send this connection.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from server.core.events import ClientEvent, Event, RoomLoaded, RoomsListed
from server.proxy import TrustedProxies
from shared import protocol as p
from shared.identity import CLAIMS_PER_HOUR


@dataclass(frozen=True)
class LimitsConfig:
    """0 turns a per-address cap off."""

    hello_timeout_s: float = 10.0  # a connection that has not sent hello by then is closed (1008)
    conns_per_address: int = 64  # open WebSocket connections per address; past it: HTTP 429
    hellos_per_minute: int = 60  # hellos per address (a burst of that many, refilled per minute)
    rooms_per_minute: int = 10  # create_room per address
    join_failures_per_minute: int = 10  # joins that fail (unknown_room, ...) per address; then joins wait
    claims_per_hour: int = CLAIMS_PER_HOUR  # name claims per address (docs/players.md); then claim_limit
    # Bytes the server may send in answer to one connection's requests, per second (bursts of
    # ANSWER_BURST_S seconds' worth); past it a request is answered rate_limited. 0: no budget.
    answer_bytes_per_s: int = 4 * 1024
    address_answer_bytes_per_s: int = 128 * 1024  # ... and to all of one address's connections
    # Whose PROXY headers name the client (both ports); none: every peer is its own client.
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)

    @classmethod
    def per_address_off(cls, hello_timeout_s: float = 10.0) -> LimitsConfig:
        """Every per-address cap off (tests open many connections from 127.0.0.1), and the
        per-connection answer budget too (tests send requests as fast as they like)."""
        return cls(
            hello_timeout_s,
            conns_per_address=0,
            hellos_per_minute=0,
            rooms_per_minute=0,
            join_failures_per_minute=0,
            claims_per_hour=0,
            answer_bytes_per_s=0,
            address_answer_bytes_per_s=0,
        )


def address_key(remote: object) -> str:
    """The key an address is counted under: the IPv4 address, or the IPv6 /64 network."""
    host = remote[0] if isinstance(remote, tuple) and remote else remote
    if not isinstance(host, str):
        return "local"
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return "local"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class TokenBucket:
    """``rate`` tokens a second, holding at most ``burst``: every request-count limit of the
    server (a connection's messages, an address's hellos, rooms and failed joins, the probes)."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float | None = None) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = self.burst
        self.last = time.monotonic() if now is None else now

    @classmethod
    def per_minute(cls, count: int, now: float) -> TokenBucket:
        """``count`` a minute, all of them at once at most."""
        return cls(count / 60.0, count, now)

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now

    def allow(self) -> bool:
        """Take a token now if there is one (the per-message check: no seconds computed)."""
        self._refill(time.monotonic())
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait(self, now: float) -> float:
        """Seconds until one token is there (0: now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> float:
        """Take a token: 0.0, or the seconds to wait when there is none (nothing taken)."""
        wait = self.wait(now)
        if wait == 0.0:
            self.tokens -= 1.0
        return wait

    def refund(self, now: float) -> None:
        """Give back a token taken for something that turned out not to count."""
        self._refill(now)
        self.tokens = min(self.burst, self.tokens + 1.0)

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst


class ByteBudget:
    """``per_s`` bytes a second, up to ``ANSWER_BURST_S`` seconds' worth at once. Spending may
    run it into debt (an answer's size is known only once it is sent); it allows more only once
    it is above zero again."""

    __slots__ = ("burst", "last", "level", "per_s")

    def __init__(self, per_s: int, now: float) -> None:
        self.per_s = per_s
        self.burst = float(per_s) * ANSWER_BURST_S
        self.level = self.burst
        self.last = now

    def _refill(self, now: float) -> None:
        self.level = min(self.burst, self.level + (now - self.last) * self.per_s)
        self.last = now

    def wait(self, now: float) -> float:
        """Seconds until it allows a request again (0: now)."""
        self._refill(now)
        return 0.0 if self.level > 0 else (1.0 - self.level) / self.per_s

    def spend(self, nbytes: int, now: float) -> None:
        self._refill(now)
        self.level -= nbytes

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.level >= self.burst


ANSWER_BURST_S = 8.0  # a byte budget holds this many seconds of its rate


@dataclass(slots=True)
class _Address:
    conns: int
    hellos: TokenBucket | None
    rooms: TokenBucket | None
    joins: TokenBucket | None
    answers: ByteBudget | None = None
    claims: TokenBucket | None = None


class AddressLimits:
    """Per-address accounting for the shell. Times come from ``clock`` (monotonic seconds)."""

    def __init__(self, config: LimitsConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self._addresses: dict[str, _Address] = {}
        self._ops = 0

    def _entry(self, key: str) -> _Address:
        entry = self._addresses.get(key)
        if entry is None:
            now, c = self.clock(), self.config
            entry = _Address(
                0,
                TokenBucket.per_minute(c.hellos_per_minute, now) if c.hellos_per_minute else None,
                TokenBucket.per_minute(c.rooms_per_minute, now) if c.rooms_per_minute else None,
                TokenBucket.per_minute(c.join_failures_per_minute, now) if c.join_failures_per_minute else None,
                ByteBudget(c.address_answer_bytes_per_s, now) if c.address_answer_bytes_per_s else None,
            )
            self._addresses[key] = entry
        self._ops += 1
        if self._ops >= 4096:
            self._ops = 0
            self.prune()
        return entry

    def prune(self) -> None:
        """Forget addresses with no connection whose budgets are all full again."""
        now = self.clock()
        idle = [
            key
            for key, entry in self._addresses.items()
            if entry.conns == 0
            and all(
                b is None or b.full(now) for b in (entry.hellos, entry.rooms, entry.joins, entry.answers, entry.claims)
            )
        ]
        for key in idle:
            del self._addresses[key]

    def __len__(self) -> int:
        return len(self._addresses)

    # ---- connections

    def connection_refused(self, key: str) -> bool:
        """Is this address at its connection cap? (Asked before the WebSocket upgrade.)"""
        cap = self.config.conns_per_address
        if not cap:
            return False
        entry = self._addresses.get(key)
        return entry is not None and entry.conns >= cap

    def opened(self, key: str) -> None:
        self._entry(key).conns += 1

    def closed(self, key: str) -> None:
        entry = self._addresses.get(key)
        if entry is not None and entry.conns > 0:
            entry.conns -= 1

    def connections(self, key: str) -> int:
        entry = self._addresses.get(key)
        return 0 if entry is None else entry.conns

    # ---- per-minute budgets: each answers 0.0 (go on) or the seconds to wait

    def take_hello(self, key: str) -> float:
        budget = self._entry(key).hellos
        return 0.0 if budget is None else budget.take(self.clock())

    def take_room(self, key: str) -> float:
        budget = self._entry(key).rooms
        return 0.0 if budget is None else budget.take(self.clock())

    def take_join(self, key: str) -> float:
        """A join takes a token of the failure budget up front (so joins sent at once over many
        connections cannot overdraw it); ``join_succeeded`` gives it back."""
        budget = self._entry(key).joins
        return 0.0 if budget is None else budget.take(self.clock())

    def take_claim(self, key: str) -> float:
        """A claim (taken or not: probing names costs the same) from the address's hourly budget."""
        cap = self.config.claims_per_hour
        if not cap:
            return 0.0
        entry = self._entry(key)
        if entry.claims is None:
            entry.claims = TokenBucket(cap / 3600.0, cap, self.clock())
        return entry.claims.take(self.clock())

    def answer_budget(self, key: str) -> ByteBudget | None:
        """The address's budget of bytes sent in answer to its requests (AnswerBudgets)."""
        return self._entry(key).answers if self.config.address_answer_bytes_per_s else None

    def join_succeeded(self, key: str) -> None:
        budget = self._entry(key).joins
        if budget is not None:
            budget.refund(self.clock())


# ---------------------------------------------------------------- what a connection makes the server send

# The game's moves, and what has its own bound: a chat line goes to every reader of its room, so
# its writes grow with the audience, and its rates (per player and per room, in the core) bound them.
UNCHARGED = (p.Move, p.Hello, p.Ping, p.Chat)
ALWAYS_ALLOWED = (p.Leave,)  # charged, never refused: leaving a room always works


class Payer(Protocol):
    """What AnswerBudgets needs of a connection (server/shell/delivery.py's Conn)."""

    @property
    def address(self) -> str: ...
    @property
    def answers(self) -> ByteBudget | None: ...
    @property
    def join_pending(self) -> str | None: ...


class AnswerBudgets:
    """The answer budgets (module docstring). The shell asks ``refusal`` before it hands a
    request to the core, runs the effects of every event inside ``charging(payers(event))``, and
    reports each frame it writes to ``sent``."""

    def __init__(self, limits: AddressLimits) -> None:
        self.limits = limits
        self.refused = 0
        self._payers: list[Payer] = []
        self._bytes = 0

    def for_connection(self) -> ByteBudget | None:
        per_s = self.limits.config.answer_bytes_per_s
        return ByteBudget(per_s, self.limits.clock()) if per_s else None

    def _address_budget(self, address: str) -> ByteBudget | None:
        return self.limits.answer_budget(address)

    def refusal(self, conn: Payer, msg: p.ClientMessage) -> p.Error | None:
        """``rate_limited`` for a request past its connection's or its address's budget, with
        the wait in ``retry_ms``; None: handle it."""
        if isinstance(msg, UNCHARGED + ALWAYS_ALLOWED):
            return None
        now = self.limits.clock()
        config = self.limits.config
        own = conn.answers
        shared = self._address_budget(conn.address)
        wait_own = 0.0 if own is None else own.wait(now)
        wait_shared = 0.0 if shared is None else shared.wait(now)
        wait = max(wait_own, wait_shared)
        if wait == 0.0:
            return None
        self.refused += 1
        if wait_own >= wait_shared:
            whose, per_s = "this connection", config.answer_bytes_per_s
        else:
            whose, per_s = "your address", config.address_answer_bytes_per_s
        retry_ms = max(1, round(wait * 1000))
        return p.Error(
            code=p.RATE_LIMITED,
            message=f"the server has sent too much in answer to {whose}'s requests (limit {per_s} bytes a "
            f"second): try again in {wait:.1f} s; retry_ms={retry_ms}",
            ref=p.message_type(msg),
        )

    def payers(self, event: Event, conns: Mapping[int, Payer]) -> list[Payer]:
        """The connections whose requests an event answers: a request itself, a room list read
        for it, a room loaded for its join."""
        if isinstance(event, ClientEvent):
            if isinstance(event.msg, UNCHARGED):
                return []
            conn = conns.get(event.conn)
            return [] if conn is None else [conn]
        if isinstance(event, RoomsListed):
            conn = conns.get(event.conn)
            return [] if conn is None else [conn]
        if isinstance(event, RoomLoaded):
            return [conn for conn in conns.values() if conn.join_pending == event.code]
        return []

    def charging(self, payers: list[Payer]) -> AbstractContextManager[None]:
        """Every byte ``sent`` meanwhile is charged to these connections (each the whole) and
        their addresses (each address once). No payers (a move, a store's answer: most events):
        one shared context that does nothing, since this runs on every event."""
        return _Charging(self, payers) if payers else NOT_CHARGING

    def _charge(self, payers: list[Payer], spent: int) -> None:
        now = self.limits.clock()
        addresses: set[str] = set()
        for conn in payers:
            if conn.answers is not None:
                conn.answers.spend(spent, now)
            if conn.address not in addresses:
                addresses.add(conn.address)
                shared = self._address_budget(conn.address)
                if shared is not None:
                    shared.spend(spent, now)

    def sent(self, nbytes: int) -> None:
        if self._payers:
            self._bytes += nbytes


class _Charging:
    """``AnswerBudgets.charging`` with payers: the bytes sent inside it are theirs (nested: the
    outer charge resumes after it)."""

    __slots__ = ("budgets", "outer", "payers")

    def __init__(self, budgets: AnswerBudgets, payers: list[Payer]) -> None:
        self.budgets = budgets
        self.payers = payers
        self.outer: tuple[list[Payer], int] = ([], 0)

    def __enter__(self) -> None:
        budgets = self.budgets
        self.outer = (budgets._payers, budgets._bytes)
        budgets._payers, budgets._bytes = self.payers, 0

    def __exit__(self, *exc: object) -> None:
        budgets = self.budgets
        spent = budgets._bytes
        budgets._payers, budgets._bytes = self.outer
        budgets._charge(self.payers, spent)


NOT_CHARGING: AbstractContextManager[None] = nullcontext()
