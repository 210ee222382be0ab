"""The Textual apps of the terminal client: the game screen, local play, races."""
