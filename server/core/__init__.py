"""The sans-I/O room core: events in, effects out (see machine.py)."""

from server.core.machine import CoreConfig, Entropy, ServerCore, summary_from_record

__all__ = ["CoreConfig", "Entropy", "ServerCore", "summary_from_record"]
