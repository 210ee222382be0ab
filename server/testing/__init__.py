"""Test tooling around the room core: the in-process test shell (shell.py) and the fuzzer (fuzzing.py).

Both carry effects out through the real shell's one dispatch (server/shell/executor.py)."""
