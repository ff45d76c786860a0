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

# The two-stack lab (tests/lab/go: quic-go HTTP/3, Go's HTTP/2 and HTTP/1.1) needs Go >= 1.24 and
# its modules. Go is taken from PATH or /usr/local/go; when there is none (Debian's golang-go is
# too old), the toolchain the Go module proxy serves as a module is unpacked into
# /usr/local/lib/tailscope-go (GOTOOLCHAIN's own mechanism, done by hand because no Go runs yet).
GO_VERSION=1.26.8
go_deps() {
  local go
  go=$(command -v go || true)
  [ -z "$go" ] && [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
  [ -z "$go" ] && [ -x /usr/local/lib/tailscope-go/bin/go ] && go=/usr/local/lib/tailscope-go/bin/go
  if [ -z "$go" ] || ! "$go" version | grep -Eq 'go1\.(2[4-9]|[3-9][0-9])'; then
    local proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%,*}
    local zip
    zip=$(mktemp --suffix=.zip)
    echo "install-lab-deps: Go $GO_VERSION from $proxy"
    timeout 600 curl -fsSL -o "$zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_VERSION.linux-amd64.zip"
    rm -rf /usr/local/lib/tailscope-go.tmp && mkdir -p /usr/local/lib/tailscope-go.tmp
    (cd /usr/local/lib/tailscope-go.tmp && python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall('.')" "$zip")
    rm -f "$zip"
    rm -rf /usr/local/lib/tailscope-go
    mv "/usr/local/lib/tailscope-go.tmp/golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-amd64" /usr/local/lib/tailscope-go
    rm -rf /usr/local/lib/tailscope-go.tmp
    chmod -R a+rX /usr/local/lib/tailscope-go && chmod a+x /usr/local/lib/tailscope-go/bin/* /usr/local/lib/tailscope-go/pkg/tool/*/*
    go=/usr/local/lib/tailscope-go/bin/go
  fi
  (cd "$(dirname "$0")/../tests/lab/go" && timeout 600 "$go" mod download) \
    && echo "install-lab-deps: Go modules of tests/lab/go present ($("$go" version))"
}
go_deps

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
