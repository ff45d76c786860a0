"""Health counters in the Prometheus text exposition format (version 0.0.4).

Counters are lifetime totals kept in state.json, so they survive restarts (a Prometheus counter
that never resets across agent restarts is still a valid counter). Exposed three ways: an HTTP
endpoint (``[metrics] listen``), ``<spool>/metrics.prom`` rewritten atomically (and an optional
extra copy for node_exporter's textfile collector), and ``tailscope agent metrics``.
"""
from __future__ import annotations

import http.server
import threading
from typing import Any

from .fsutil import atomic_write_bytes

P = "tailscope_agent_"

# name -> (type, help, source key in state counters/gauges or live values)
METRICS: list[tuple[str, str, str, str]] = [
    ("packets_total", "counter", "Packets in finished capture files.", "packets"),
    ("captured_bytes_total", "counter", "Captured bytes (headers only) in finished files.", "bytes_captured"),
    ("kernel_drops_total", "counter", "Packets dropped by the kernel during capture (libpcap ps_drop).",
     "kernel_drops"),
    ("interface_drops_total", "counter", "Packets dropped by the interface (libpcap ps_ifdrop).", "interface_drops"),
    ("overlap_duplicates_removed_total", "counter",
     "Packets seen by two tcpdumps during a rotation hand-over, kept once.", "overlap_duplicates_removed"),
    ("files_finished_total", "counter", "Capture files finished (compressed, with manifest).", "files_finished"),
    ("files_stats_missing_total", "counter", "Finished files without tcpdump exit statistics.",
     "files_stats_missing"),
    ("files_recovered_total", "counter", "Raw captures finished by a restarted agent.", "recovered_files"),
    ("files_shipped_total", "counter", "Files landed in the landing zone.", "files_shipped"),
    ("files_already_landed_total", "counter",
     "Files found already landed (same sha256) when retried after a crash.", "files_already_landed"),
    ("bytes_shipped_total", "counter", "Bytes of data files landed.", "bytes_shipped"),
    ("upload_failures_total", "counter", "Failed shipping attempts (each is retried with backoff).",
     "upload_failures"),
    ("quota_dropped_files_total", "counter", "Finished files dropped because the spool quota was full.",
     "files_dropped_quota"),
    ("quota_dropped_packets_total", "counter", "Packets in files dropped by the spool quota.", "packets_dropped_quota"),
    ("quota_dropped_bytes_total", "counter", "Bytes of files dropped by the spool quota.", "bytes_dropped_quota"),
    ("tombstones_shipped_total", "counter", "Drop tombstones written to the landing zone.", "tombstones_shipped"),
    ("ship_conflicts_total", "counter", "Files whose name landed with different content (kept aside).",
     "ship_conflicts"),
    ("capture_starts_total", "counter", "tcpdump processes started.", "capture_starts"),
    ("capture_failures_total", "counter", "tcpdump processes that failed or exited unexpectedly.",
     "capture_failures"),
    ("files_pending", "gauge", "Finished files waiting in the spool to be shipped.", "files_pending"),
    ("tombstones_pending", "gauge", "Drop tombstones waiting to be shipped.", "tombstones_pending"),
    ("spool_bytes", "gauge", "Bytes used by the spool.", "spool_bytes"),
    ("spool_quota_bytes", "gauge", "Spool disk quota.", "spool_quota_bytes"),
    ("capture_running", "gauge", "1 while a tcpdump is capturing.", "capture_running"),
    ("last_success_timestamp_seconds", "gauge", "Unix time of the last successful upload.",
     "last_success_timestamp_seconds"),
    ("last_failure_timestamp_seconds", "gauge", "Unix time of the last failed upload attempt.",
     "last_failure_timestamp_seconds"),
    ("last_file_finished_timestamp_seconds", "gauge", "End of the capture window of the last finished file.",
     "last_file_finished_timestamp_seconds"),
]


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: Any) -> str:
    if isinstance(v, float):
        return repr(v) if v == v else "NaN"
    return str(int(v))


def render(values: dict[str, Any], info: dict[str, str]) -> str:
    labels = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(info.items()))
    out = [f"# HELP {P}info Agent identity and version.", f"# TYPE {P}info gauge", f"{P}info{{{labels}}} 1"]
    for name, mtype, help_, key in METRICS:
        if key not in values or values[key] is None:
            continue
        out += [f"# HELP {P}{name} {help_}", f"# TYPE {P}{name} {mtype}", f"{P}{name} {_num(values[key])}"]
    return "\n".join(out) + "\n"


def write_textfiles(text: str, paths: list[str]) -> None:
    for p in paths:
        if p:
            atomic_write_bytes(p, text.encode())


class MetricsServer:
    """/metrics over HTTP on a background thread (stdlib only)."""

    def __init__(self, listen: str, produce):
        host, port = listen.rsplit(":", 1)
        produce_ = produce

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = produce_().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep stderr for the JSON logs
                pass

        self.httpd = http.server.ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.httpd.daemon_threads = True
        self.address = self.httpd.server_address
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
