"""The asyncio WebSocket shell around the room core, as parts (see docs/architecture.md)."""

from server.shell.config import ServerConfig, ServerStats, log_event
from server.shell.server import RaceServer, run_server

__all__ = ["RaceServer", "ServerConfig", "ServerStats", "log_event", "run_server"]
