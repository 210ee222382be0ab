"""The race server: rooms, authoritative races, stores, WebSocket shell."""
