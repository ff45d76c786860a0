"""Randomized draws of the two-stack lab (issue 32): quic-go HTTP/3 beside Go's HTTP/2 and
HTTP/1.1 over TLS 1.3 (post-quantum key share: a two-segment ClientHello), the same impairments
for every transport through the lab's relay, captured at the server at snaplen 256, no key log.

Families (seed % 5): clean; loss (Bernoulli 1-3 % both ways); reordering (1 in 10-30 packets held
5-30 ms, server to client or both ways); policing (token bucket 3-8 Mbit/s, bucket 16-64 kB,
server to client); queue (FIFO 3-10 Mbit/s holding 200-500 ms, server to client). Shared: RTT
40-200 ms (log-uniform), no jitter; cubic or bbr for TCP (quic-go runs its own Cubic/Reno);
`rounds` rounds of one connection per protocol, each five requests of 1-300 kB (log-uniform, the
same plan for every protocol of the draw) 50 ms apart.
"""
from __future__ import annotations

import math
import random

from ..draws import available_cc
from ..scenarios import Scenario

FAMILIES = ("clean", "loss", "reordering", "policing", "queue")
PROTOS = ("h3", "h2", "h1")
ROUNDS = 2
REQUESTS = 5


def _loguniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def stack_draw(seed: int, cc_choices: tuple | None = None) -> Scenario:
    rng = random.Random(10_000 + seed)
    family = FAMILIES[seed % len(FAMILIES)]
    rtt_ms = _loguniform(rng, 40, 200)
    cc = rng.choice(tuple(c for c in (cc_choices or available_cc()) if c in ("cubic", "bbr")) or ("cubic",))
    sizes = [int(_loguniform(rng, 1_000, 300_000)) for _ in range(REQUESTS)]
    kw: dict = {}
    params = []
    rate_bps = 40e6
    if family == "loss":
        p = round(rng.uniform(0.01, 0.03), 4)
        kw["loss"] = {"model": "bernoulli", "p": p, "dir": "both"}
        params.append(f"bernoulli {p:.2%} both")
    elif family == "reordering":
        every, hold = rng.randint(10, 30), rng.randint(5, 30)
        dirs = rng.choice((("s2c",), ("s2c", "c2s")))
        kw["rules"] = tuple({"kind": "reorder", "dir": d, "every": every, "by_ms": hold} for d in dirs)
        params.append(f"reorder 1/{every} held {hold} ms {'+'.join(dirs)}")
    elif family == "policing":
        rate, bucket = _loguniform(rng, 3_000, 8_000), int(_loguniform(rng, 16_000, 64_000))
        kw["police"] = {"dir": "s2c", "rate_kbit": round(rate), "burst_bytes": bucket}
        rate_bps = rate * 1000
        params.append(f"policer {rate:.0f} kbit/s bucket {bucket} B")
    elif family == "queue":
        rate, queue_s = _loguniform(rng, 3_000, 10_000), rng.uniform(0.2, 0.5)
        kw["bottleneck"] = {"dir": "s2c", "rate_kbit": round(rate), "queue_bytes": int(rate * 1000 / 8 * queue_s)}
        kw["bottleneck_backend"] = "relay"
        rate_bps = rate * 1000
        params.append(f"bottleneck {rate:.0f} kbit/s queue {queue_s * 1000:.0f} ms")
    total = sum(sizes) * len(PROTOS) * ROUNDS
    deadline = round(3 * total * 8 / rate_bps + len(PROTOS) * ROUNDS * (REQUESTS + 4) * 6 * rtt_ms / 1000 + 30, 1)
    workload = {"go": {"protos": list(PROTOS), "sizes": sizes, "gap": "50ms", "conns": ROUNDS}}
    name = f"stack{seed:04d}_{family}"
    description = (f"seed {seed}: {family}; RTT {rtt_ms:.0f} ms; TCP {cc}; {ROUNDS} rounds of "
                   f"{'/'.join(PROTOS)}; sizes {sizes}; " + "; ".join(params))
    return Scenario(name, description, workload, delay_ms=round(rtt_ms / 2, 1), cc=cc, seed=seed, app="go",
                    snaplen=256,
                    linger_s=round(max(0.5, 3 * rtt_ms / 1000), 2), deadline_s=deadline, **kw)


def stack_pool(seeds) -> list[Scenario]:
    cc = available_cc()
    return [stack_draw(s, cc) for s in seeds]
