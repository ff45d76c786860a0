"""A capture group through the native core: what both engines run for one group of files.

A group's files (an agent's rotation set, or whatever `--capture-id` names one) are read in time
order through one native Session, so a connection that spans files is one flow; a file that
overlaps in time what the capture holds starts a new capture (run_model.starts_new_capture).
The local engine runs groups on threads (`--jobs`), the Spark engine one group per task; both
through `GroupRunner`, so a group gives the same rows on either.
"""
from __future__ import annotations

import threading

from tailscope import _native
from tailscope.jobs.enrichment.enrich_options import EnrichmentOptions, capture_site, has_sources, unenriched_summary
from tailscope.jobs.run.run_model import (
    SESSION_COUNTERS,
    AnalyzeOptions,
    Planned,
    add_session_totals,
    capture_id_of,
    fail,
    internal_error,
    record_stats,
    sha256_of,
    starts_new_capture,
)


def batches_pass_through_python(options: AnalyzeOptions) -> bool:
    """Do the flows and queries batches come back to Python (jobs/enrichment/enrich.py, then the
    pseudonyms made after it)? Not without enrichment sources or pseudonyms: the native core
    then appends the unknown enrichment columns itself and writes every table, and pyarrow is
    never loaded."""
    return has_sources(options.enrichment) or options.pseudonymize_key is not None


def open_session(capture_id: str, options: AnalyzeOptions, shards: int = 1) -> "_native.Session":
    session = _native.Session(
        capture_id,
        tcp_idle_timeout_s=options.tcp_idle_timeout_s,
        udp_idle_timeout_s=options.udp_idle_timeout_s,
        tcp_closed_linger_s=options.tcp_closed_linger_s,
        max_flows=options.max_flows,
        batch_rows=options.batch_rows,
        shards=shards,
    )
    for path in options.keylogs:
        session.add_keylog(str(path))
    if options.packets != "all":
        session.keep_packets(options.packets)
    if options.since_ns is not None or options.until_ns is not None or options.bpf_filter:
        session.select(since_ns=options.since_ns, until_ns=options.until_ns, filter=options.bpf_filter)
    return session


class GroupRunner:
    """Runs capture groups into one staged writer, keeping the run's session totals.

    `enricher` None: the batches never come back to Python (the core appends the unknown
    enrichment columns and writes every table; local.batches_pass_through_python). `progress`
    is told each file's progress. `shards`: threads each capture's flows are analysed on (the
    rows are the same for any number)."""

    def __init__(self, options: AnalyzeOptions, writer, enricher=None, pseudonymizer=None, progress=None, shards=1):
        self.options, self.writer, self.enricher, self.pseudonymizer = options, writer, enricher, pseudonymizer
        self.progress, self.shards = progress, shards
        self.lock = threading.Lock()  # the shared state below, and one drain's batches at a time
        self.totals = dict.fromkeys(SESSION_COUNTERS, 0)
        self.unenriched = {"flows": 0, "queries": 0, "flows_without_site": 0}

    def enrichment_summary(self) -> dict:
        if self.enricher is not None:
            return self.enricher.summary()
        return unenriched_summary(self.options.enrichment, **self.unenriched)

    def emit_all(self, drained) -> None:
        # A drain's flows, then its queries: enrichment reads the one for the other, so a drain
        # is emitted whole while other captures wait.
        with self.lock:
            for table, batch in drained:
                out = self.enricher.apply(table, batch) if self.enricher is not None else batch
                if out is not None:
                    if self.pseudonymizer is not None:  # after enrichment, which reads the real address
                        out = self.pseudonymizer.apply(table, out)
                    self.writer.write(table, out)

    def run(self, group: list[Planned], paths: dict[str, str] | None = None) -> None:
        """One capture group's files in time order (a new capture where a file overlaps what
        the capture holds). `paths` maps a file's label to the local copy to read (the Spark
        engine fetches inputs on object storage first); by default the file's own path."""
        paths = paths or {}
        options, writer = self.options, self.writer
        session, session_reports, session_site, session_last_ts, capture_id = None, [], None, None, None

        def close_session():
            try:
                self.emit_all(session.finish(writer.native))
            except _native.InternalError as exc:
                # The flows still open are lost with the session: every file that fed it says so.
                for r in session_reports:
                    internal_error(r, str(exc))
            with self.lock:
                add_session_totals(self.totals, session)
                if self.enricher is None:
                    written = session.written()
                    self.unenriched["flows"] += written.get("flows", 0)
                    self.unenriched["queries"] += written.get("queries", 0)
                    if session_site is None:
                        self.unenriched["flows_without_site"] += written.get("flows", 0)

        for p in group:
            if session is None or starts_new_capture(group[0].group, session_last_ts, p):
                if session is not None:
                    close_session()
                capture_id = capture_id_of(p, options)
                session = open_session(capture_id, options, self.shards)
                session_reports, session_last_ts = [], None
                session_site = capture_site(options.enrichment, (p.file.sidecar or {}).get("site"))
                if self.enricher is None:
                    session.write_unenriched((options.enrichment or EnrichmentOptions()).h3_res, session_site)
                else:
                    with self.lock:
                        self.enricher.set_capture_site(capture_id, session_site)
            p.report.capture_id = capture_id
            if options.checksums and p.report.sha256 is None:
                p.report.sha256 = sha256_of(p.file.path)
            try:
                cursor = session.open(paths.get(p.file.label, str(p.file.path)), p.file.label)
            except _native.CaptureFileError as exc:
                fail(p.report, str(exc))
                continue
            except _native.InternalError as exc:
                fail(p.report, str(exc), kind="internal")
                continue
            session_reports.append(p.report)
            while not cursor.done:
                self.emit_all(session.step(cursor, writer=writer.native))
                if self.progress is not None:
                    with self.lock:
                        self.progress.update(p.file.label, cursor.input_offset, cursor.stats()["frames"])
            flush_error = None
            try:
                self.emit_all(session.flush(writer.native))
            except _native.InternalError as exc:
                flush_error = str(exc)
            record_stats(p.report, cursor.stats())
            if flush_error:
                internal_error(p.report, flush_error)
            if self.progress is not None:
                with self.lock:
                    self.progress.file_done(p.file.size, p.report.frames, p.file.label)
            if p.report.last_ts_ns is not None:
                session_last_ts = max(session_last_ts or p.report.last_ts_ns, p.report.last_ts_ns)
        if session is not None:
            close_session()
