#!/usr/bin/env bash
# System packages for the peer comparisons (tshark, tcptrace) and a Rust toolchain check.
# The lab's and the agent's own needs are installed by install-lab-deps.sh and
# install-agent-deps.sh. Idempotent; installs only what is missing; needs root to install.
set -euo pipefail
command -v cargo >/dev/null || { echo "error: cargo (Rust toolchain) not found; install it with rustup first" >&2; exit 1; }
need=()
command -v tshark   >/dev/null || need+=(tshark)
command -v tcptrace >/dev/null || need+=(tcptrace)
command -v c++      >/dev/null || need+=(g++)  # libFuzzer, built by the fuzz targets (scripts/fuzz-ci.sh)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing system packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing system packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections || true
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
