"""CLI subcommands; each module's ``register(subparsers, common)`` adds one (see tui.cli)."""
