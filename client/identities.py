"""The client's identities (docs/players.md): one secret per server, kept in the state directory
(client/state.py) in ``identities.json``, readable by the owner only, never shown on screen.

``{server_url: {"secret": ..., "profile_id": ..., "name": ...}}``. An entry whose ``profile_id``
is None is a claim under way (the secret is written before the claim is sent, so a claim whose
answer was lost is retried with the same secret and finds the profile it made); a connection
says hello with a secret only once its claim has been answered.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.state import state_dir, write_private
from shared.identity import SECRET_BYTES, check_secret

FILE_NAME = "identities.json"


@dataclass(frozen=True)
class Identity:
    server: str
    secret: str
    profile_id: str | None
    name: str | None

    @property
    def claimed(self) -> bool:
        return self.profile_id is not None


class IdentityFileError(ValueError):
    """An identities file that cannot be read (its reason in words)."""


def identities_path(folder: Path | None = None) -> Path:
    return (folder or state_dir()) / FILE_NAME


def new_secret() -> str:
    """32 random bytes, urlsafe base64 without padding: 43 characters."""
    return base64.urlsafe_b64encode(secrets.token_bytes(SECRET_BYTES)).rstrip(b"=").decode()


def server_key(url: str) -> str:
    """How a server is named in the file: its URL without a path, query or trailing slash."""
    return url.split("?", 1)[0].rstrip("/")


def parse(text: str, where: str) -> dict[str, Identity]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IdentityFileError(f"{where} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise IdentityFileError(f"{where} holds no identities (expected a JSON object by server)")
    out: dict[str, Identity] = {}
    for server, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("secret"), str):
            raise IdentityFileError(f"{where}: the entry for {server!r} has no secret")
        if check_secret(entry["secret"]) is not None:
            raise IdentityFileError(f"{where}: the entry for {server!r} holds no valid secret")
        profile, name = entry.get("profile_id"), entry.get("name")
        out[server_key(str(server))] = Identity(
            server_key(str(server)),
            entry["secret"],
            profile if isinstance(profile, str) else None,
            name if isinstance(name, str) else None,
        )
    return out


def dump(identities: dict[str, Identity]) -> str:
    body: dict[str, Any] = {
        key: {"secret": i.secret, "profile_id": i.profile_id, "name": i.name} for key, i in sorted(identities.items())
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def load_all(folder: Path | None = None) -> dict[str, Identity]:
    path = identities_path(folder)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return parse(text, str(path))


def save_all(identities: dict[str, Identity], folder: Path | None = None) -> Path:
    path = identities_path(folder)
    write_private(path, dump(identities))
    return path


def identity_for(url: str, folder: Path | None = None) -> Identity | None:
    """The identity kept for this server (claimed or under way), or None. An unreadable file
    counts as none: playing unclaimed still works."""
    try:
        return load_all(folder).get(server_key(url))
    except (IdentityFileError, OSError):
        return None


def claimed_secret(url: str, folder: Path | None = None) -> str | None:
    """The secret a hello to this server carries: only a claimed identity's."""
    found = identity_for(url, folder)
    return found.secret if found is not None and found.claimed else None


def remember(identity: Identity, folder: Path | None = None) -> Path:
    identities = load_all(folder)
    identities[identity.server] = identity
    return save_all(identities, folder)


def forget(url: str, folder: Path | None = None) -> bool:
    identities = load_all(folder)
    if identities.pop(server_key(url), None) is None:
        return False
    save_all(identities, folder)
    return True


def export_to(path: Path, folder: Path | None = None) -> int:
    """Every identity, to ``path`` (mode 0600). How many."""
    identities = load_all(folder)
    write_private(path, dump(identities))
    os.chmod(path, 0o600)
    return len(identities)


def import_from(path: Path, folder: Path | None = None) -> tuple[int, list[str]]:
    """Take the identities in ``path`` in: (how many, the servers whose identity it replaced)."""
    incoming = parse(path.read_text(encoding="utf-8"), str(path))
    identities = load_all(folder)
    replaced = [key for key, i in incoming.items() if key in identities and identities[key].secret != i.secret]
    identities.update(incoming)
    save_all(identities, folder)
    return len(incoming), replaced
