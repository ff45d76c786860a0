"""Impairment models used by the relay. Pure functions of (time, packet size,
seeded RNG): no I/O, so they can be unit-tested and their decisions replayed.

Times are in seconds (float, monotonic clock) and sizes in bytes of the whole
IP packet, which is what a router's queue or policer accounts for.
"""
from __future__ import annotations

import random
from collections import deque


class Bernoulli:
    """Independent loss with probability p (the classic 'random loss')."""

    def __init__(self, p: float, rng: random.Random):
        self.p = p
        self.rng = rng

    def drop(self) -> tuple[bool, dict]:
        return self.rng.random() < self.p, {}


class GilbertElliott:
    """Two-state Markov loss (Gilbert-Elliott), the usual model of bursty loss.

    p: P(good -> bad) per packet, r: P(bad -> good) per packet,
    k: loss probability in good state, h: loss probability in bad state.
    Mean burst length in the bad state is 1/r packets."""

    def __init__(self, p: float, r: float, h: float = 1.0, k: float = 0.0, rng: random.Random | None = None):
        self.p, self.r, self.h, self.k = p, r, h, k
        self.rng = rng or random.Random(0)
        self.bad = False

    def drop(self) -> tuple[bool, dict]:
        # Transition first, then draw the loss in the new state.
        if self.bad:
            if self.rng.random() < self.r:
                self.bad = False
        elif self.rng.random() < self.p:
            self.bad = True
        lost = self.rng.random() < (self.h if self.bad else self.k)
        return lost, {"ge_state": "bad" if self.bad else "good"}


class TokenBucket:
    """A traffic policer: tokens (bytes) refill at `rate_bps`/8 per second up to
    `burst_bytes`; a packet passes if enough tokens remain, else it is dropped
    (never queued - that is what distinguishes policing from shaping)."""

    def __init__(self, rate_kbit: float, burst_bytes: int, now: float):
        self.rate = rate_kbit * 1000 / 8.0   # bytes per second
        self.burst = float(burst_bytes)
        self.tokens = float(burst_bytes)     # a fresh bucket is full
        self.last = now

    def admit(self, size: int, now: float) -> tuple[bool, float]:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        before = self.tokens
        if size <= self.tokens:
            self.tokens -= size
            return True, before
        return False, before


class RateQueue:
    """A bottleneck link: FIFO drained at `rate_kbit`, tail-drop beyond
    `queue_bytes` of backlog. Returns each packet's departure time, so a deep
    queue turns into queueing delay (bufferbloat) rather than loss."""

    def __init__(self, rate_kbit: float, queue_bytes: int):
        self.rate = rate_kbit * 1000 / 8.0
        self.limit = queue_bytes
        self.busy_until = 0.0
        self.inflight: deque[tuple[float, int]] = deque()   # (departure, size) not yet departed
        self.backlog = 0

    def enqueue(self, size: int, now: float) -> tuple[bool, float, int]:
        while self.inflight and self.inflight[0][0] <= now:
            self.backlog -= self.inflight.popleft()[1]
        if self.backlog + size > self.limit:
            return False, now, self.backlog
        start = max(now, self.busy_until)
        self.busy_until = start + size / self.rate
        self.inflight.append((self.busy_until, size))
        self.backlog += size
        return True, self.busy_until, self.backlog


class Delay:
    """Fixed one-way delay plus Gaussian jitter (clipped at zero).

    Jitter alone never reorders here: the caller keeps per-direction release
    times monotonic, as on a real serial link. Reordering is a separate,
    explicit (and logged) rule, so ground truth stays unambiguous."""

    def __init__(self, delay_ms: float, jitter_ms: float, rng: random.Random):
        self.delay = delay_ms / 1000.0
        self.jitter = jitter_ms / 1000.0
        self.rng = rng

    def sample(self) -> float:
        if self.jitter <= 0:
            return self.delay
        return max(0.0, self.rng.gauss(self.delay, self.jitter))
