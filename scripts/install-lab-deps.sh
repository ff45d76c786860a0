#!/usr/bin/env bash
# Install what the ground-truth lab (tests/lab/) needs on a Debian/Ubuntu host.
# Idempotent: only packages whose command is missing are installed, so running it
# again (CI, a fresh VM, a developer laptop) is cheap and changes nothing.
#
# The lab itself is pure-stdlib Python; everything below is a system tool:
#   ip / tc (iproute2)   network namespaces, veth, tun, policy routing, tbf
#   nft (nftables)       kernel random loss / policing (optional kernel backend)
#   tcpdump              the server-side capture (the pcap under test)
#   tshark               cross-checks in the lab smoke tests (-z conv,tcp)
#   ping (iputils-ping)  a bounded connectivity probe before each scenario
#   ethtool              turn TSO/GSO/GRO off so the pcap shows wire-sized segments
#   sysctl (procps)      per-namespace TCP settings
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-lab-deps: must run as root (apt-get)" >&2
  exit 1
fi

# command -> Debian package
declare -A PKG=(
  [ip]=iproute2
  [tc]=iproute2
  [nft]=nftables
  [tcpdump]=tcpdump
  [tshark]=tshark
  [ping]=iputils-ping
  [ethtool]=ethtool
  [sysctl]=procps
)

missing=()
for cmd in "${!PKG[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$cmd" ] && ! [ -x "/sbin/$cmd" ]; then
    missing+=("${PKG[$cmd]}")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-lab-deps: all lab tools present"
  exit 0
fi

# De-duplicate (ip and tc share iproute2).
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "install-lab-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer "no" without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections || true
timeout 600 apt-get update -q
timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-lab-deps: done"
