"""The `tailscope` subcommands, one module each (registered in python/tailscope/cli.py)."""
