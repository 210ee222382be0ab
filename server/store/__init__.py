"""Where rooms, players and move logs live: one interface, two implementations."""

from server.store.base import Store, StoreUnavailable

__all__ = ["Store", "StoreUnavailable"]
