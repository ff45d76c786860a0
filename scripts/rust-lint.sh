#!/usr/bin/env bash
# Formatting (rustfmt.toml) and clippy over the workspace, warnings as errors. rustfmt and clippy
# are rustup components: added when missing; a toolchain without rustup (a distribution's cargo)
# cannot add them, and the lint is then skipped with a warning rather than failing the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
for c in rustfmt clippy; do
    if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 && rustup component add "$c" >/dev/null 2>&1 || true
    fi
done
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all -- --check
else
    echo "rust-lint: warning: rustfmt unavailable, formatting not checked" >&2
fi
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --workspace --all-targets --release -q -- -D warnings
else
    echo "rust-lint: warning: clippy unavailable, lints not checked" >&2
fi
echo "rust-lint: ok"
