"""The project's own shared package: cards, deals, the engine and the protocol. Pure: no I/O."""
