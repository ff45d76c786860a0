#!/usr/bin/env python3
"""A stand-in for tcpdump, for testing the agent's capture loop without root or a network.

Understands the arguments the agent passes (-w FILE, -s SNAPLEN, -d, --version). Writes a nanosecond
pcap with a synthetic packet every FAKE_TCPDUMP_INTERVAL seconds (default 0.01), prints
"listening on" like tcpdump, and on SIGTERM prints tcpdump's exit statistics and exits.
FAKE_TCPDUMP_FAIL=start   fail at once like a missing interface
FAKE_TCPDUMP_FAIL=after:N exit with an error after N packets (interface went away)
"""
import os
import signal
import struct
import sys
import time


def main(argv):
    if "--version" in argv:
        print("tcpdump version 0.0-fake\nlibpcap version 0.0-fake")
        return 0
    if "-d" in argv:
        return 1 if "bad" in argv[-1] else 0
    fail = os.environ.get("FAKE_TCPDUMP_FAIL", "")
    iface = argv[argv.index("-i") + 1]
    if fail == "start":
        sys.stderr.write(f"tcpdump: {iface}: No such device exists\n")
        return 1
    out = argv[argv.index("-w") + 1]
    snaplen = int(argv[argv.index("-s") + 1])
    interval = float(os.environ.get("FAKE_TCPDUMP_INTERVAL", "0.01"))
    limit = int(fail.split(":")[1]) if fail.startswith("after:") else None
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    n = 0
    with open(out, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, 1))
        f.flush()
        sys.stderr.write(f"tcpdump: listening on {iface}, link-type EN10MB (Ethernet), "
                         f"snapshot length {snaplen} bytes\n")
        sys.stderr.flush()
        while not stop:
            ts = time.time_ns()
            data = (b"FAKE%010d" % n + os.urandom(8)).ljust(min(snaplen, 100), b"\0")
            f.write(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(data), 1500) + data)
            f.flush()
            n += 1
            if limit is not None and n >= limit:
                sys.stderr.write(f"tcpdump: pcap_loop: The interface {iface} went down\n{n} packets captured\n"
                                 f"{n} packets received by filter\n0 packets dropped by kernel\n")
                return 1
            time.sleep(interval)
    sys.stderr.write(f"\n{n} packets captured\n{n + 2} packets received by filter\n2 packets dropped by kernel\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
