"""Fair play (docs/rules.md, "Fair play"): commit to a deal before the race, reveal it after."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from shared.deal import MAX_DEAL, check_deal_number


def new_salt() -> str:
    """32 random bytes as 64 lower-case hex digits."""
    return secrets.token_bytes(32).hex()


def random_deal() -> int:
    """A deal number from a cryptographic random source (fair races)."""
    return secrets.randbelow(MAX_DEAL + 1)


def commitment(deal: int, salt: str) -> str:
    """Lower-case hex SHA-256 of the ASCII text ``the-plot:<deal in decimal>:<salt>``."""
    check_deal_number(deal)
    return hashlib.sha256(f"the-plot:{deal}:{salt}".encode("ascii")).hexdigest()


def check_commitment(deal: int, salt: str, expected: str) -> bool:
    """True when ``expected`` is the commitment to ``deal`` with ``salt`` (case-insensitive hex)."""
    try:
        actual = commitment(deal, salt)
    except (ValueError, UnicodeEncodeError):
        return False
    return hmac.compare_digest(actual, expected.strip().lower())
