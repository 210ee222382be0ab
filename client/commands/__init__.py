"""One module per ``plot`` subcommand."""
