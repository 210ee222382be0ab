"""The terminal side of The Plot race: the ``plot`` command and the Textual client."""
