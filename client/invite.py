"""Invites: a room's code with the server's address in front (``ws://HOST:PORT/CODE``), what
``plot host`` shows and ``plot join`` / ``plot watch`` take, so a pasted line needs no ``--server``.
Pure and light: command modules import it."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def invite(server: str, code: str) -> str:
    """The invite to room ``code`` on ``server``: the server's address with the code as its last
    path segment (``ws://192.168.1.20:8765/K7M3P``; behind a proxy ``wss://plot.example.org/K7M3P``)."""
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + code, "", ""))


def split_invite(text: str) -> tuple[str, str]:
    """An invite's server address and its last path segment (the code, as typed). ValueError when
    ``text`` is not a ws:// or wss:// URL ending in a segment."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"{text!r} is not an invite: an invite is ws://HOST:PORT/CODE or wss://HOST/CODE")
    path, _, last = parts.path.rstrip("/").rpartition("/")
    if not last:
        raise ValueError(f"{text!r} names no room: an invite ends in the room's code (ws://HOST:PORT/CODE)")
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), last
