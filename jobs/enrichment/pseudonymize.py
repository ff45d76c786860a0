"""Client-address pseudonyms (`analyze --pseudonymize-clients KEYFILE`; docs/privacy.md).

The scheme is Crypto-PAn, in the native core (signatures/src/pseudonym.rs). It is applied to each
flows batch after enrichment, which needs the real address (carrier, ASN, the session join that
gives the H3 cell): from there on, every table holds only the pseudonym. Only `flows` carries
addresses (packets, queries and events name their flow by `flow_id`); its `community_id` is
recomputed over the pseudonymized tuple. The same key gives the same pseudonyms in every run and
engine, so joins and week-over-week comparisons keep working.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

KEY_BYTES = 32


class PseudonymKeyError(ValueError):
    """A key file that cannot be used (named in the message)."""


def load_key(path: Path | str) -> bytes:
    """A key file holds 32 bytes: raw, or as 64 hexadecimal digits (`openssl rand -hex 32`)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PseudonymKeyError(f"{path}: cannot read the pseudonymization key ({exc.strerror or exc})") from exc
    text = data.strip()
    if len(text) == 2 * KEY_BYTES:
        try:
            return bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            pass
    if len(data) == KEY_BYTES:
        return data
    raise PseudonymKeyError(f"{path}: a pseudonymization key is {KEY_BYTES} bytes, raw or as {2 * KEY_BYTES} hex digits "
                    f"(make one with: openssl rand -hex 32 > {path.name}); found {len(data)} bytes")


def key_warning(path: Path | str) -> str | None:
    """Readable by others than its owner: worth a warning, as ssh gives for a private key."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        return f"{path}: the pseudonymization key is readable by other users (chmod 600 it)"
    return None


def fingerprint(key: bytes) -> str:
    """Names the key in manifests without revealing it: whoever holds a key can check which runs
    used it, nobody can get it back."""
    return "sha256:" + hashlib.sha256(b"tailscope pseudonymization key\0" + key).hexdigest()[:16]


class Pseudonymizer:
    def __init__(self, key: bytes):
        from tailscope import _native

        self._native = _native.Pseudonymizer(key)
        self.fingerprint = fingerprint(key)

    def apply(self, table: str, batch):
        if table == "flows":
            return self._native.apply_flows(batch)
        return batch

    def address(self, text: str) -> str:
        return self._native.address(text)


def sidecar_problem(label: str, sidecar: dict | None, run_fingerprint: str | None) -> str | None:
    """An input whose agent requires pseudonymized clients (its manifest names the key by
    fingerprint, capture/README.md) is analysed only with that key."""
    wanted = ((sidecar or {}).get("pseudonymize_clients") or {}).get("key_fingerprint")
    if not wanted:
        return None
    if run_fingerprint is None:
        return (f"{label}: its capture agent requires pseudonymized client addresses (key {wanted}): "
                "run with --pseudonymize-clients KEYFILE")
    if run_fingerprint != wanted:
        return f"{label}: its capture agent requires the pseudonymization key {wanted}, this run has {run_fingerprint}"
    return None
