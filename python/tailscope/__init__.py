"""tailscope: passive TCP/QUIC trace analytics.

The work is done by the Rust core (``tailscope._native``: ``parsers/`` and ``signatures/``);
this package is the thin Python layer that orchestrates it.
"""
__version__ = "0.1.0"
