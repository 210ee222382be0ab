"""The limits a public server needs against one abusive address (docs/reliability.md, Limits).

Per connection, the shell (server/app.py) already has a message rate (a token bucket that
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
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from server.proxy import TrustedProxies


@dataclass(frozen=True)
class LimitsConfig:
    """0 turns a per-address cap off."""

    hello_timeout_s: float = 10.0  # a connection that has not sent hello by then is closed (1008)
    conns_per_address: int = 64  # open WebSocket connections per address; past it: HTTP 429
    hellos_per_minute: int = 60  # hellos per address (a burst of that many, refilled per minute)
    rooms_per_minute: int = 10  # create_room per address
    join_failures_per_minute: int = 10  # joins that fail (unknown_room, ...) per address; then joins wait
    # Whose PROXY headers name the client (both ports); none: every peer is its own client.
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)

    @classmethod
    def per_address_off(cls, hello_timeout_s: float = 10.0) -> LimitsConfig:
        """Every per-address cap off (tests open many connections from 127.0.0.1)."""
        return cls(hello_timeout_s, 0, 0, 0, 0)


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


class Budget:
    """A token bucket of ``per_minute`` tokens, refilled at ``per_minute`` a minute."""

    __slots__ = ("last", "per_minute", "tokens")

    def __init__(self, per_minute: int, now: float) -> None:
        self.per_minute = per_minute
        self.tokens = float(per_minute)
        self.last = now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(self.per_minute), self.tokens + (now - self.last) * self.per_minute / 60.0)
        self.last = now

    def wait(self, now: float) -> float:
        """Seconds until one token is there (0: now)."""
        self._refill(now)
        if self.tokens >= 1.0:
            return 0.0
        return (1.0 - self.tokens) * 60.0 / self.per_minute

    def take(self, now: float) -> float:
        """Take a token: 0.0, or the seconds to wait when there is none (nothing taken)."""
        wait = self.wait(now)
        if wait == 0.0:
            self.tokens -= 1.0
        return wait

    def refund(self, now: float) -> None:
        """Give back a token taken for something that turned out not to count."""
        self._refill(now)
        self.tokens = min(float(self.per_minute), self.tokens + 1.0)

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.per_minute


@dataclass(slots=True)
class _Address:
    conns: int
    hellos: Budget | None
    rooms: Budget | None
    joins: Budget | None


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
                Budget(c.hellos_per_minute, now) if c.hellos_per_minute else None,
                Budget(c.rooms_per_minute, now) if c.rooms_per_minute else None,
                Budget(c.join_failures_per_minute, now) if c.join_failures_per_minute else None,
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
            if entry.conns == 0 and all(b is None or b.full(now) for b in (entry.hellos, entry.rooms, entry.joins))
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

    def join_succeeded(self, key: str) -> None:
        budget = self._entry(key).joins
        if budget is not None:
            budget.refund(self.clock())
