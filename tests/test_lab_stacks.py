"""QUIC vs TCP on stacks we did not build (issue 32): quic-go HTTP/3 beside Go's HTTP/2 and
HTTP/1.1 over TLS 1.3 with post-quantum key shares, in randomized draws of five families (clean,
loss, reordering, policing, deep queue: tests/lab/go/draws.py), captured at the server at snaplen
256 with no key log, scored against the clients' own per-request logs (tests/lab/go/eval.py has
the rules; the table is printed and written to <pytest tmp>/lab-stacks*/stacks-table.txt).

Gates, per protocol pooled over the families (CI's draws, seeds 0-19, hold 40 requests per
family and protocol, so one request is 2.5 points there and a family's p95 is not one request's
alone, as it was over seeds 0-9; `python -m tests.lab.go.eval --seeds 0-49` is the larger pool): >= 95 % of requests found, <= 5 % extra queries, >= 90 % within one RTT of the
client's duration; no Initial-loss flag the relay log does not explain; per family, the QUIC tail
reduction within 15 points of the clients' and of their sign. KNOWN_GAPS are marked xfail (not
strict: a figure near its line passes on some draws) with what the draws showed.

Needs root, the lab's tools and Go (the binaries are built once per source version). ~1.5 minutes
on 2 cores.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.lab import run_scenarios  # noqa: E402
from tests.lab.draws import parse_seeds  # noqa: E402
from tests.lab.go import eval as stacks  # noqa: E402
from tests.lab.go.draws import FAMILIES, PROTOS, stack_pool  # noqa: E402
from tests.lab.go.lab import available  # noqa: E402
from tests.lab.report import require_lab, show_table  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-stacks")]

# Five runs on 2026-11-28 scored with the rules of issue 32's fourth pass (quic-go's ACKs grown
# by their ranges and ECN counts, what a client packet can acknowledge at a server-side capture,
# re-sends after the ACK, the first request cut off with the Finished): HTTP/3 found 99-100 %,
# extra 0-0.5 %, within one RTT 94-98 % (docs/accuracy.md has the tables), the policing and
# queue tails within 15 points in all five: no longer gaps. The loss tail neither since the
# client's IPv4 IDs date a request lost before the capture (docs/queries.md, a request lost whole
# before the capture) and server data sent before the server read a request answers none of it
# (a CI run's HTTP/2 preface lost behind the Finished): six runs of seeds 0-9 (2026-11-29, CI's
# included), clients +55 | +35 | +23 | -4 | -0 | +21 %, tailscope +56 | +30 | +13 | -4 | -3 | +21 %.
# The reordering tail neither since a packet after client ACKs the server left unanswered is a
# re-send and a PMTU probe is larger than every data packet, not only than the last probe (issue
# 32's seventh pass): the same six runs, clients +34 | +29 | +43 | +34 | +34 | +34 %, tailscope
# +33 | +26 | +41 | +31 | +33 | +34 % (+29 | +23 | +38 | +31 | +19 | +26 before); a seventh (a
# fresh-clone CI run) +34 | +31 % once more unanswered ACKs restart the count of re-sends.
# The loss tail gated again since a QUIC response ends at the ACK that delivered it (issue 32's
# eighth pass: a delayed ACK read for when it could have left, a server packet after the ACK of the
# last packet ending the run, a probe amid a queued response's ACKs opening nothing, an ACK a round
# trip after the first re-send no held original's): nine saved runs of seeds 0-9 (the four CI runs
# of 2026-11-29 here among them), clients -4 | +15 | +21 | +55 | +35 | +23 | -4 | -0 | -4 %, tailscope
# -5 | +14 | +21 | +56 | +35 | +19 | -4 | -3 | -4 % (-20 | +8 | +21 | +56 | +30 | +13 | -4 | -3 |
# -12 before; the first failed a CI run); the queue tail +25 % against +25 % in all nine (+21 to
# +36 before).
# The reordering tail failed the fresh-clone CI of 58f0619 (+19 % against the clients' +34 %: a
# 172 kB response's re-sends after its short last packet read as more response); the loss tail
# missed twice in six runs here (HTTP/2 requests lost before the capture behind a WINDOW_UPDATE
# lost their date; a SYN lost before the capture, which no server-side capture sees, set the p95).
# Since a full-sized packet soon after a response's short last packet is a re-send, the date
# survives, and the tail's truth leaves out the wait for a lost opening packet (go/eval.py), those
# six runs re-score within 15 points in every family, and so did a fresh-clone CI run of 24e8dd5
# (docs/accuracy.md has the figures). A seventh run failed the loss tail (-2 % against the clients'
# -27 %): two HTTP/3 requests dropped before the capture, which nothing at the server dates (the
# truth now leaves their wait out, as a lost SYN's), one of them also waiting for its FIN's probe
# (now read: a probe pair is response data).
KNOWN_GAPS: dict[str, str] = {}


def _gap(name: str):
    return pytest.mark.xfail(strict=False, reason=KNOWN_GAPS[name]) if name in KNOWN_GAPS else ()


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    require_lab()
    ok, why = available()
    if not ok:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("lab-stacks")
    results = run_scenarios(stack_pool(parse_seeds(stacks.CI_SEEDS)), out, max_parallel=3, return_exceptions=True)
    ev = stacks.evaluate(results)
    ev.table = stacks.format_table(ev, details=15)
    ev.table_path = out / "stacks-table.txt"
    ev.table_path.write_text(ev.table + "\n")
    return ev


def test_print_table(evaluation, request, capsys):
    show_table(evaluation, request, capsys, "stacks_table")


def test_every_draw_ran(evaluation):
    assert not evaluation.failed, evaluation.failed
    assert len(evaluation.draws) == len(parse_seeds(stacks.CI_SEEDS))
    for d in evaluation.draws:
        assert all(d.protos[p].requests == 10 for p in PROTOS), (d.name, {p: d.protos[p].requests for p in PROTOS})


def _per_proto(metric: str) -> list:
    return [pytest.param(p, marks=_gap(f"{p} {metric}")) for p in PROTOS]


@pytest.mark.parametrize("proto", _per_proto("found"))
def test_requests_found(evaluation, proto):
    t = evaluation.totals(proto)
    assert t.found >= stacks.FOUND_TARGET * t.requests, "\n".join([f"{t.found}/{t.requests}", *t.details[:15]])


@pytest.mark.parametrize("proto", _per_proto("extra"))
def test_extra_queries(evaluation, proto):
    t = evaluation.totals(proto)
    assert t.extra <= stacks.EXTRA_TARGET * t.queries, "\n".join([f"{t.extra}/{t.queries}", *t.details[:15]])


@pytest.mark.parametrize("proto", _per_proto("within"))
def test_within_one_rtt(evaluation, proto):
    t = evaluation.totals(proto)
    assert t.within >= stacks.WITHIN_TARGET * t.found, "\n".join([f"{t.within}/{t.found}", *t.details[:15]])


@pytest.mark.parametrize("x", [pytest.param("handshake_rtt", marks=_gap("handshake_rtt"))])
def test_quic_handshake_rtt(evaluation, x):
    hs = evaluation.handshake()
    assert hs, "no QUIC flow scored"
    assert sum(ok for ok, _ in hs) >= stacks.HANDSHAKE_TARGET * len(hs), [d for ok, d in hs if not ok]


def test_no_initial_loss_where_nothing_was_lost(evaluation):
    assert not evaluation.initial_fp(), evaluation.initial_fp()


@pytest.mark.parametrize("family", [pytest.param(f, marks=_gap(f"tail {f}")) for f in FAMILIES])
def test_quic_tail_reduction_has_the_clients_sign(evaluation, family):
    t = evaluation.tail(family)
    assert t is not None, f"no {family} draw scored"
    assert stacks.tail_ok(t), t


def test_the_tails_truth_leaves_out_a_dropped_request_datagrams_wait():
    """`unseen_request_ns` on relay records shaped like stack0001_loss port 43786: the request's
    datagram dropped, an ACK let through, then the probe's two copies of the request."""
    ms = 1_000_000

    def rec(t, action, size, port=43786):
        return {"proto": "udp", "dir": "c2s", "action": action, "sport": port, "len": size, "rx_ts_ns": t * ms}

    lost = {"sport": 43786, "t_send_ns": 1000 * ms}
    whole = {"sport": 43786, "t_send_ns": 2000 * ms}
    other = {"sport": 5, "t_send_ns": 1000 * ms}
    records = [rec(1000, "drop", 77), rec(1071, "forward", 32), rec(1160, "forward", 77), rec(1160, "forward", 77),
               rec(2000, "forward", 76), rec(1000, "drop", 77, port=5)]
    got = stacks.unseen_request_ns(records, [lost, whole, other])
    assert got == {id(lost): 160 * ms}, got
