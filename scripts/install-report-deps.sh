#!/usr/bin/env bash
# What the weekly report's tests need on a Debian/Ubuntu host: a headless Chromium, which
# tests/test_report.py drives to render the HTML report and take a screenshot. The report itself
# needs nothing beyond the Python package (its plots are inline SVG written by tailscope).
# Idempotent: installs only when no chromium binary is on PATH; needs root (or sudo) to install.
set -euo pipefail

log() { printf '[install-report-deps] %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  log "chromium present ($(command -v chromium || command -v chromium-browser))"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "please install Chromium (Debian package: chromium); no apt-get here"
  exit 1
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { log "must run as root to install chromium"; exit 1; }
  SUDO="sudo"
fi
log "installing chromium (and fonts so text renders)"
export DEBIAN_FRONTEND=noninteractive
timeout 600 $SUDO apt-get update -q
# fonts-dejavu-core: without any font, headless Chromium draws no glyphs at all
timeout 1200 $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
log "done: $(command -v chromium)"
