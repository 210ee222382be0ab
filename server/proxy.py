"""The PROXY protocol (HAProxy's, v1 and v2) from trusted proxies only, on the game and web ports.

Behind a balancer every connection comes from the balancer's address, so every per-address
budget (server/limits.py) would be one budget for all its clients. A balancer that sends the
PROXY header (HAProxy: ``send-proxy-v2`` on its ``server`` lines) tells the node who the client
is; the node believes it only from the addresses given with ``--trusted-proxy``.

The rules, on every connection:

- from a trusted address, a PROXY header (v1 or v2) first: the connection is the client's the
  header names. A v2 ``LOCAL`` header (health checks), ``UNKNOWN`` or a Unix-socket source: the
  proxy's own address. No header at all: the proxy's own address too (a monitor on the proxy's
  host, a proxy not yet set up to send one: its clients then share one budget, as before, and
  nothing breaks).
- from any other address, a PROXY header is refused: the connection is closed unanswered, and
  logged (``proxy_header_refused``). Anything else goes on as usual (only the first bytes are
  looked at).
- a malformed header, or one larger than MAX_HEADER_BYTES, is refused too.

Parsing is proxy-protocol's (a maintained library); this module frames the header in a byte
stream (how many bytes it takes) and applies the rules. The header is read before TLS would
start, so the trusted-proxy mode goes with plain ports (TLS ends at the proxy): server/cli.py
refuses --trusted-proxy together with --tls-cert.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

from proxyprotocol import ProxyProtocolIncompleteError
from proxyprotocol.result import ProxyResult, is_ipv4, is_ipv6
from proxyprotocol.v1 import ProxyProtocolV1
from proxyprotocol.v2 import ProxyProtocolV2
from websockets.asyncio.server import ServerConnection

V1_SIGNATURE = b"PROXY "
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_MAX_BYTES = 107  # the specification's longest v1 line, CRLF included
V2_FIXED_BYTES = 16  # signature, version and command, family, length
MAX_HEADER_BYTES = 2048  # a v2 header with its TLVs; HAProxy's are well under 300 bytes

log = logging.getLogger("plot.server")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ProxyHeaderRefused(Exception):
    """The connection sent a PROXY header it may not send, or a malformed one: close it."""


@dataclass(frozen=True)
class TrustedProxies:
    """The addresses whose PROXY headers are believed (none by default)."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """``"10.0.0.0/8, 127.0.0.1, ::1"`` -> the networks; ValueError naming the bad item."""
        networks: list[Network] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"not an address or network: {item!r} (expected e.g. 10.0.0.0/8 or ::1)") from None
        return cls(tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __str__(self) -> str:
        return ",".join(str(net) for net in self.networks) or "none"

    def trusts(self, peer: object) -> bool:
        """Is ``peer`` (a socket's peer name: ``(host, port, ...)``) inside one of the networks?"""
        if not self.networks or not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
            return False
        try:
            ip = ipaddress.ip_address(peer[0].split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip.version == net.version and ip in net for net in self.networks)


NO_TRUST = TrustedProxies()


class ProxyHeaderReader:
    """Sans-I/O: the bytes a connection sends first go to :meth:`feed` until it answers.

    ``feed`` returns None while it cannot tell yet, then the bytes that follow the header (all of
    them when there was none); :attr:`client` is then the address to count the connection under.
    It raises ProxyHeaderRefused for a header the rules refuse."""

    def __init__(self, peer: object, trusted: bool) -> None:
        self.peer = peer
        self.trusted = trusted
        self.client: object = peer
        self.proxied = False  # a header named the client
        self._data = b""
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def wanted(self) -> int:
        """The fewest bytes that can bring a decision nearer (for a stream read: never reads past
        the header)."""
        if self._done:
            return 0
        data = self._data
        if data.startswith(V2_SIGNATURE) and len(data) >= V2_FIXED_BYTES:
            return max(1, self._v2_length() - len(data))
        return 1

    def feed(self, data: bytes) -> bytes | None:
        if self._done:
            return data
        self._data += data
        data = self._data
        for signature in (V1_SIGNATURE, V2_SIGNATURE):
            if len(data) < len(signature) and signature.startswith(data):
                return None  # could still be either
        if not (data.startswith(V1_SIGNATURE) or data.startswith(V2_SIGNATURE)):
            return self._finish(0)  # no header: all of it is the connection's own
        if not self.trusted:
            raise ProxyHeaderRefused("a PROXY header from an address that is not a trusted proxy")
        if data.startswith(V1_SIGNATURE):
            end = data.find(b"\r\n", 0, V1_MAX_BYTES)
            if end < 0:
                if len(data) >= V1_MAX_BYTES:
                    raise ProxyHeaderRefused(f"a PROXY v1 line longer than {V1_MAX_BYTES} bytes")
                return None
            return self._take(ProxyProtocolV1(), end + 2)
        if len(data) < V2_FIXED_BYTES:
            return None
        length = self._v2_length()
        if length > MAX_HEADER_BYTES:
            raise ProxyHeaderRefused(f"a PROXY v2 header of {length} bytes (at most {MAX_HEADER_BYTES})")
        if len(data) < length:
            return None
        return self._take(ProxyProtocolV2(), length)

    def _v2_length(self) -> int:
        return V2_FIXED_BYTES + int.from_bytes(self._data[14:16], "big")

    def _take(self, parser: ProxyProtocolV1 | ProxyProtocolV2, length: int) -> bytes:
        try:
            result = parser.unpack(self._data[:length])
        except (ValueError, ProxyProtocolIncompleteError) as exc:  # the library's syntax errors are ValueErrors
            raise ProxyHeaderRefused(f"a malformed PROXY header ({exc})") from None
        self.client = client_of(result, self.peer)
        self.proxied = self.client is not self.peer
        return self._finish(length)

    def _finish(self, consumed: int) -> bytes:
        self._done = True
        rest, self._data = self._data[consumed:], b""
        return rest


def client_of(result: ProxyResult, peer: object) -> object:
    """The client a header names, as a peer name ``(host, port)``; the proxy's own for the rest."""
    if is_ipv4(result) or is_ipv6(result):
        return (str(result.source[0]), result.source[1])
    return peer


async def read_header(reader: asyncio.StreamReader, peer: object, trusted: TrustedProxies) -> tuple[object, bytes]:
    """A stream's PROXY header, read exactly: (the client's address, the bytes read that were not
    a header). ProxyHeaderRefused as the rules say; IncompleteReadError if the peer goes."""
    header = ProxyHeaderReader(peer, trusted.trusts(peer))
    while True:
        rest = header.feed(await reader.readexactly(header.wanted()))
        if rest is not None:
            return header.client, rest


class ProxiedConnection(ServerConnection):
    """A websockets server connection that takes a PROXY header off the front of its stream
    before the HTTP upgrade; :attr:`remote_address` is then the client's. Subclass it per
    listener with :func:`trusting` (the trusted addresses are a class attribute because
    websockets makes the connection itself)."""

    trusted_proxies: ClassVar[TrustedProxies] = NO_TRUST
    _proxy_header: ProxyHeaderReader | None = None
    _client_address: object = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self._client_address = peer
        # Every peer's first bytes are looked at: an untrusted one's PROXY header is refused.
        self._proxy_header = ProxyHeaderReader(peer, self.trusted_proxies.trusts(peer))

    def data_received(self, data: bytes) -> None:
        header = self._proxy_header
        if header is None:
            super().data_received(data)
            return
        try:
            rest = header.feed(data)
        except ProxyHeaderRefused as exc:
            self._proxy_header = None
            log_refused(exc, self._client_address)
            self.transport.abort()
            return
        if rest is None:
            return
        self._proxy_header = None
        self._client_address = header.client
        if rest:
            super().data_received(rest)

    @property
    def remote_address(self) -> Any:
        """The client's address: the PROXY header's from a trusted proxy, else the socket's peer."""
        return self._client_address

    def eof_received(self) -> None:
        self._proxy_header = None
        super().eof_received()


C = TypeVar("C", bound=ProxiedConnection)


def trusting(base: type[C], trusted: TrustedProxies) -> type[C]:
    """``base`` believing the PROXY headers of ``trusted`` (a subclass; ``base`` itself, which trusts
    no one, when ``trusted`` is empty)."""
    if not trusted:
        return base
    return cast(type[C], type(base.__name__, (base,), {"trusted_proxies": trusted}))


def log_refused(exc: ProxyHeaderRefused, peer: object) -> None:
    host = peer[0] if isinstance(peer, tuple) and peer else peer
    log.warning("proxy_header_refused", extra={"fields": {"peer": str(host), "why": str(exc)}})
