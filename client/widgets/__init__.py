"""Textual widgets of the terminal client. Everything here renders from a ``shared.engine.View``."""
