"""Helpers for the edge capture agent tests (network namespaces, traffic, S3 server, landing checks)."""
