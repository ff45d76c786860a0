#!/usr/bin/env bash
# Install what the tailscope edge capture agent and its tests need. Idempotent: every step
# checks before it acts, so re-running is cheap.
#
#   scripts/install-agent-deps.sh            # system packages + S3 test server
#   SKIP_S3_SERVER=1 scripts/install-agent-deps.sh   # edge hosts: no test server needed
#
# System packages (Debian/Ubuntu):
#   tcpdump   - the libpcap front end the agent drives (capture, BPF, kernel drop stats)
#   iproute2  - `ip netns` / veth for the lab tests that generate real traffic
#   zstd      - optional CLI to inspect .pcap.zst files by hand (the agent compresses with the native core's zstd)
# Test-only:
#   s3s-fs    - a real S3-compatible server on a directory (crates.io), started by the tests
set -euo pipefail

S3S_FS_VERSION="${S3S_FS_VERSION:-0.14.1}"   # 0.15+ needs rustc >= 1.96
CARGO_JOBS="${CARGO_JOBS:-1}"

log() { printf '[install-agent-deps] %s\n' "$*" >&2; }

need_pkgs=()
for bin_pkg in tcpdump:tcpdump ip:iproute2 zstd:zstd; do
  bin="${bin_pkg%%:*}"; pkg="${bin_pkg##*:}"
  command -v "$bin" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if ((${#need_pkgs[@]})); then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    log "apt-get install ${need_pkgs[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"
  else
    log "please install: ${need_pkgs[*]} (no apt-get here)"; exit 1
  fi
else
  log "system packages present (tcpdump, iproute2, zstd)"
fi

# tcpdump must be allowed to capture; as non-root the binary needs the capabilities.
if [[ $(id -u) -ne 0 ]]; then
  log "not root: the agent user needs CAP_NET_RAW,CAP_NET_ADMIN (see capture/tailscope-agent.service)"
fi

if [[ "${SKIP_S3_SERVER:-0}" != 1 ]]; then
  if command -v s3s-fs >/dev/null 2>&1 && s3s-fs --version 2>/dev/null | grep -q "$S3S_FS_VERSION"; then
    log "s3s-fs $S3S_FS_VERSION present: $(command -v s3s-fs)"
  else
    command -v cargo >/dev/null 2>&1 || { log "cargo not found: install Rust (rustup) first"; exit 1; }
    log "building s3s-fs $S3S_FS_VERSION (nice, -j $CARGO_JOBS; takes a few minutes)"
    nice -n 19 cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked -j "$CARGO_JOBS"
  fi
fi
log "done"
