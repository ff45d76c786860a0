#!/usr/bin/env bash
# Captures of Go's own HTTPS stack (tlsload: crypto/tls + net/http, standard library only) for the
# signatures tests, without key log, at snaplen 256 (the issue 32 vantage point). Three network
# namespaces as in the lab (client - router - server, veths of MTU 1500 with TSO/GSO/GRO off: the
# capture shows wire segments), tcpdump at the server; the router limits the responses' rate with
# a token bucket (netem is not on every kernel the lab runs on: responses stream for tens of ms)
# and drops what a capture must miss (a drop in the client's own namespace is no loss: its TCP
# sees the local error and sends later, in order). Needs root, nft, Go >= 1.24 (whose default
# key share X25519MLKEM768 makes the ClientHello ~1.5 kB: two segments).
#   tests/lab/go/make_fixtures.sh [OUT_DIR]    (default signatures/testdata)
# Writes go-<name>.pcap and go-<name>.jsonl (the client's log: one line per request) per capture.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../../signatures/testdata}
mkdir -p "$out"
go=${GO:-/usr/local/go/bin/go}
bin=$(mktemp -d)/tlsload
(cd "$here" && "$go" build -o "$bin" ./tlsload)
p=tsgo-$$
c=$p-c r=$p-r s=$p-s
cleanup() {
  for ns in $c $r $s; do ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
  sleep 0.2
  for ns in $c $r $s; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
for ns in $c $r $s; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip -n "$c" link add eth0 type veth peer name toc netns "$r"
ip -n "$s" link add eth0 type veth peer name tos netns "$r"
ip -n "$c" addr add 10.77.1.2/24 dev eth0
ip -n "$r" addr add 10.77.1.1/24 dev toc
ip -n "$r" addr add 10.77.2.1/24 dev tos
ip -n "$s" addr add 10.77.2.2/24 dev eth0
for x in "$c eth0" "$r toc" "$r tos" "$s eth0"; do
  set -- $x
  ip -n "$1" link set "$2" up
  ip netns exec "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1 || true
done
ip -n "$c" route add default via 10.77.1.1
ip -n "$s" route add default via 10.77.2.1
ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
for ns in $c $s; do ip netns exec "$ns" sysctl -qw net.ipv4.tcp_no_metrics_save=1; done
ip netns exec "$r" nft add table inet tsgo
ip netns exec "$r" nft add chain inet tsgo lossy '{ type filter hook forward priority 0; }'

# capture NAME RATE CLIENT-ARGS...: one capture, the server at 10.77.2.2:8443.
capture() {
  local name=$1 rate=$2; shift 2
  ip netns exec "$r" tc qdisc replace dev toc root tbf rate "$rate" burst 16kb latency 500ms
  ip netns exec "$s" "$bin" -listen 10.77.2.2:8443 & local srv=$!
  ip netns exec "$s" tcpdump -i eth0 -s 256 -U -w "$out/go-$name.pcap" 'tcp port 8443' 2>/dev/null & local dump=$!
  sleep 1.5
  ip netns exec "$c" "$bin" -connect 10.77.2.2:8443 "$@" > "$out/go-$name.jsonl"
  sleep 0.5
  kill "$dump" "$srv"; wait "$dump" "$srv" 2>/dev/null || true
  echo "go-$name: $(wc -l < "$out/go-$name.jsonl") requests, $(stat -c %s "$out/go-$name.pcap") bytes"
}

# (1) HTTP/1.1: the ClientHello (X25519MLKEM768 key share, ~1.5 kB) spans two segments.
capture h1-pq 100mbit -proto h1 -sizes 1000,3000,500 -gap 30ms
# (2) HTTP/2: the client's control records (WINDOW_UPDATE, SETTINGS ACK, PING) while a 175 kB
# response streams for ~70 ms; small requests after it (HPACK-indexed HEADERS).
capture h2-window 20mbit -proto h2 -sizes 175000,1000,1000,2000 -gap 30ms
# (5) The ClientHello's first segment lost before the capture (in the router): the capture shows
# its second segment, then the resend. A quota of one full segment: the first such packet
# matches, the resend exceeds it.
ip netns exec "$r" nft add rule inet tsgo lossy tcp dport 8443 meta length 1000-1600 quota until 1600 bytes drop
capture h1-hello-lost 100mbit -proto h1 -sizes 1000 -gap 30ms
