"""`tailscope analyze`: the main job on the local engine."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_SOME_INPUTS_FAILED = 1
EXIT_USAGE = 2
EXIT_NOTHING_READ = 3

EPILOG = """\
re-runs:
  An input whose content (sha256) a committed run of --out already processed is skipped and
  said so: running the same command twice, or piping the same capture into - twice, does not
  count anything twice. --reprocess analyses such inputs again and replaces their captures'
  rows in the same commit. Refused, one line naming --reprocess: a held input asked with a wider
  --since/--until window than its run took; a capture that grew since the dataset took its first
  bytes. Inputs tailscope prune removed are skipped and counted (below the retention horizon).
  A dataset keeps one --filter and one pseudonymization key (or none): a run that would mix
  them is refused before reading anything (exit 2).

exit status:
  0  every input was read completely, or there was nothing new to read
  1  the run finished, but some inputs were missing, unreadable, truncated, corrupt or refused
     (see the summary and the run manifest; everything else was processed)
  2  usage error (bad option), or a --filter or pseudonymization other than the dataset's
  3  no input could be read at all
  4  a file or directory could not be read or written (one line names it, e.g. --out)
  70 internal error (a bug; TAILSCOPE_DEBUG=1 shows the traceback)
  130 interrupted (Ctrl-C): nothing of the run is committed
  141 standard output closed early (a pipe's reader went away)

output layout (Parquet, partitioned by UTC date):
  OUT/packets/date=YYYY-MM-DD/part-<run>-<n>.parquet   one row per TCP/UDP packet
  OUT/flows/date=YYYY-MM-DD/part-<run>-<n>.parquet     one row per connection
  OUT/queries/date=YYYY-MM-DD/part-<run>-<n>.parquet   one row per request/response exchange
  OUT/events/date=YYYY-MM-DD/part-<run>-<n>.parquet    one row per signature occurrence
  OUT/files/part-<run>-<n>.parquet                     one row per input file
  OUT/_runs/<run>.json                                 run manifest (written last)
"""


def register(sub: argparse._SubParsersAction) -> None:
    from tailscope import _native

    d = _native.defaults()  # the session defaults, one table in Rust (signatures/src/defaults.rs)
    p = sub.add_parser(
        "analyze",
        help="decode captures, rebuild flows, write the Parquet dataset",
        description="Decode pcap/pcapng captures (plain, gzip or zstd), rebuild bidirectional flows "
        "and write the packets, flows and files tables as Parquet. Files of one capture (a rotation "
        "set) are read in time order so connections spanning files stay whole.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="capture files, directories (walked recursively) or glob patterns; - reads a capture from "
                        "standard input (tcpdump -w - | tailscope analyze - --out DS)")
    p.add_argument("--out", "-o", type=_dataset_arg, metavar="DIR",
                   help="dataset directory (created if missing; runs append). Without it, a quick look: the inputs are "
                        "analysed into a temporary dataset, their connections listed as `tailscope conn` lists them "
                        "(the summary on standard error), and nothing is kept")
    p.add_argument("--engine", choices=["local", "spark"], default="local", help="execution engine: local (default, no JVM) or spark (docs/spark.md)")
    p.add_argument("--capture-id", metavar="ID", help="treat all inputs as one capture (one rotation set) with this id")
    p.add_argument("--tcp-idle-timeout", type=float, default=d["tcp_idle_timeout_s"], metavar="SEC",
                   help=f"end a TCP flow after this idle time (default: {d['tcp_idle_timeout_s']:g})")
    p.add_argument("--udp-idle-timeout", type=float, default=d["udp_idle_timeout_s"], metavar="SEC",
                   help=f"end a UDP flow after this idle time (default: {d['udp_idle_timeout_s']:g})")
    p.add_argument("--max-flows", type=int, default=d["max_flows"], metavar="N",
                   help=f"flow table limit; past it the least recently active flow is ended and counted as evicted (default: {d['max_flows']})")
    p.add_argument("--no-checksums", action="store_true", help="skip sha256 of inputs in the manifest")
    p.add_argument("--incremental", action=argparse.BooleanOptionalAction, default=True,
                   help="skip inputs whose content (sha256) a committed run of --out processed (default: on; "
                        "--no-incremental appends them again, counting their rows twice)")
    p.add_argument("--reprocess", action="store_true",
                   help="analyse inputs --out already holds again and replace their rows (whole captures; local datasets)")
    sg = p.add_argument_group("spark engine (docs/spark.md)")
    sg.add_argument("--spark-master", metavar="URL", help="Spark master (default: spark-submit's, else local[*])")
    sg.add_argument("--spark-split-captures", action="store_true",
                    help="spread each capture's flows over many tasks by shuffling its frames (for captures too large "
                         "for one task; default: a task per capture group, no shuffle)")
    sg.add_argument("--partitions", type=int, metavar="N", help="tasks the capture groups are spread over, or the shuffle partitions of --spark-split-captures (default: 2 per core)")
    sg.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line and no per-file summary")
    p.add_argument("--json", action="store_true", help="print the run manifest as JSON instead of the summary")
    p.add_argument("--keylog", action="append", default=[], type=Path, metavar="FILE", help="TLS key log (SSLKEYLOGFILE format): decrypt the QUIC connections it has secrets for and tag their loss, retransmissions and reordering (repeatable; the SSLKEYLOGFILE variable is not read)")
    sel = p.add_argument_group("which packets (as tcpdump -r FILE EXPR; left-out frames are counted as skipped)")
    sel.add_argument("--filter", "-f", dest="bpf_filter", metavar="EXPR",
                     help="capture filter in tcpdump's language, run by libpcap: e.g. 'tcp port 443 or udp port 443' "
                          "(skip reason: filtered)")
    sel.add_argument("--since", metavar="TIME", help="take packets from this time on: ISO 8601, UTC unless an offset is given "
                                                  "(2026-11-23, 2026-11-23T08:00, 2026-11-23T08:00+01:00); skip reason outside_time_window")
    sel.add_argument("--until", metavar="TIME", help="take packets before this time (same format)")
    p.add_argument("--packets", choices=["all", "tagged", "none"], default="all",
                   help="rows of the packets table: all (default), tagged (packets with an analysis tag or an RTT "
                        "sample: what signatures and RTT questions read; fleet scale) or none; flows, queries and "
                        "events are complete either way (benchmarks/README.md: bytes per million packets)")
    p.add_argument("--jobs", "-j", type=int, metavar="N",
                   help="threads of the local engine (default: one per core): captures run in parallel, and "
                        "when fewer captures than N are left each capture's flows are spread over the spare threads "
                        "(shards keyed by flow, as tcptrace-style analysis needs). The dataset is the same for any N. "
                        "Each capture in flight holds its own flow table and batches (about 100 MiB on busy traffic)")
    p.add_argument("--compact-over", type=int, default=None, metavar="N",
                   help="after the run, compact each partition (a table's day, the files table) holding more than N part "
                        "files (default: 24, a day of hourly runs; 0: never; local datasets only): readers see old or "
                        "new files, never both (tailscope compact)")
    p.add_argument("--pseudonymize-clients", type=Path, metavar="KEYFILE",
                   help="store client addresses as Crypto-PAn pseudonyms keyed by KEYFILE (32 bytes, raw or hex: "
                        "openssl rand -hex 32); enrichment still reads the real address; docs/privacy.md")
    g = p.add_argument_group("enrichment (flows and queries; docs/enrichment.md)")
    g.add_argument("--prefixes", action="append", default=[], type=Path, metavar="FILE.csv", help="IP-prefix table: prefix,carrier[,asn] (longest prefix wins; repeatable)")
    g.add_argument("--asn-db", type=Path, metavar="FILE.mmdb", help="MaxMind-format ASN/ISP database, for addresses no --prefixes row covers")
    g.add_argument("--sessions", action="append", default=[], type=Path, metavar="FILE", help="app-telemetry session records, Parquet or CSV (files, directories, globs; repeatable)")
    g.add_argument("--regions", type=Path, metavar="FILE.csv", help="region names by H3 cell: h3_cell,region (cells of any resolution)")
    g.add_argument("--h3-res", type=int, default=7, metavar="N", help="H3 resolution of the flows' hexagon, 0-15 (default: 7, ~1.4 km edge)")
    g.add_argument("--site", metavar="NAME", help="site of inputs without an agent manifest naming one")
    p.set_defaults(func=run)


def _skip_pyarrow_pandas_probe() -> None:
    """pyarrow imports pandas the first time it turns a Python object into an array or a
    scalar, only to ask whether the object is a pandas one (its Cython shim, and the C++ type
    inference for pandas' null values). That import costs as much as importing pyarrow (about
    620 M instructions and 37 MiB of RSS, benchmarks/README.md), and the local engine never
    hands pyarrow a pandas object. Make those one-time probes find no pandas; pyarrow still
    imports it when something asks for pandas itself (to_pandas, from_pandas)."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    class NoPandas:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "pandas":
                raise ModuleNotFoundError("not needed by the local engine", name=name)
            return None

    sys.meta_path.insert(0, NoPandas)
    try:
        pa.array([], pa.null())
        pa.scalar("")
    finally:
        sys.meta_path.remove(NoPandas)


def parse_time(text: str | None, flag: str) -> int | None:
    """ISO 8601 (date, or date and time, with an optional offset; UTC without one) as ns since the epoch."""
    import datetime as dt

    if text is None:
        return None
    try:
        t = dt.datetime.fromisoformat(text.strip().replace(" ", "T"))
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected an ISO 8601 time, e.g. 2026-11-23 or 2026-11-23T08:00:00Z") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 10**9 + t.microsecond * 1000


def run(args: argparse.Namespace) -> int:
    if args.out is not None:
        return _run(args)
    # A quick look (as tcptrace or tshark -r give): a temporary dataset, its connections, gone.
    import tempfile

    if args.engine == "spark" or args.reprocess:
        print("tailscope analyze: error: --engine spark and --reprocess need --out DIR (a dataset to keep)", file=sys.stderr)
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="tailscope-look-") as tmp:
        args.out = Path(tmp) / "ds"
        rc = _run(args, summary_to=sys.stderr)
        if rc in (EXIT_OK, EXIT_SOME_INPUTS_FAILED) and not args.json and (args.out / "flows").is_dir():
            from tailscope.jobs.analytics import tabular
            from tailscope.jobs.analytics.db import connect
            from tailscope.jobs.commands.conn import DEFAULT_COLUMNS, listing_sql

            con = connect(args.out)
            try:
                rel = con.sql(listing_sql(list(DEFAULT_COLUMNS), None, None))
                tabular.write(rel.columns, rel.fetchall(), "tsv", sys.stdout)
            finally:
                con.close()
    return rc


def _dataset_arg(text: str):
    """--out: a URL stays a string (Path("s3://b/ds") is "s3:/b/ds", a local directory of that
    name: spark-submit's documented `--out s3a://...` wrote there), a local name is a Path."""
    from tailscope.jobs.dataset.storage import is_url

    return text if is_url(text) else Path(text)


def _run(args: argparse.Namespace, summary_to=None) -> int:
    # pyarrow's default pool (mimalloc) keeps the buffers freed after each Parquet row group for
    # reuse: ~22 MiB of peak RSS on the 1M-packet benchmark, for the same instruction count (the
    # record batches come from Rust, not from this pool). Read once, at the pool's first use, so
    # it is set before pyarrow is imported; an explicit setting wins.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    from tailscope.jobs.enrichment.enrich_options import EnrichmentError, EnrichmentOptions
    from tailscope.jobs.run.groups import batches_pass_through_python
    from tailscope.jobs.run.local import analyze
    from tailscope.jobs.run.run_model import AnalyzeOptions, SelectionError
    from tailscope.jobs.run.summary import print_summary

    for name, value in (("--tcp-idle-timeout", args.tcp_idle_timeout), ("--udp-idle-timeout", args.udp_idle_timeout), ("--max-flows", args.max_flows)):
        if value <= 0:
            print(f"tailscope analyze: error: {name} must be positive, got {value}", file=sys.stderr)
            return EXIT_USAGE
    try:
        since_ns, until_ns = parse_time(args.since, "--since"), parse_time(args.until, "--until")
    except ValueError as exc:
        print(f"tailscope analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if (args.since or args.until or args.bpf_filter) and args.engine == "spark":
        print("tailscope analyze: error: --filter, --since and --until work with --engine local only", file=sys.stderr)
        return EXIT_USAGE
    if "-" in args.inputs and sys.stdin.isatty():
        print("tailscope analyze: error: input - reads a capture from standard input, which is a terminal: "
              "pipe one in (tcpdump -w - ... | tailscope analyze - --out DIR)", file=sys.stderr)
        return EXIT_USAGE
    if "-" in args.inputs and args.engine == "spark":
        print("tailscope analyze: error: input - (standard input) works with --engine local only", file=sys.stderr)
        return EXIT_USAGE
    for k in args.keylog:
        if not k.is_file():
            print(f"tailscope analyze: error: --keylog {k}: not a readable file", file=sys.stderr)
            return EXIT_USAGE
    if isinstance(args.out, str) and args.engine != "spark":
        print(f"tailscope analyze: error: --out {args.out}: a dataset on object storage or HDFS is written by "
              "--engine spark (docs/spark.md)", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(args.out, Path) and args.out.exists() and not args.out.is_dir():
        print(f"tailscope analyze: error: --out {args.out}: exists and is not a directory", file=sys.stderr)
        return EXIT_USAGE
    try:
        enrichment = EnrichmentOptions(
            prefixes=args.prefixes, asn_db=args.asn_db, sessions=args.sessions, regions=args.regions, h3_res=args.h3_res, site=args.site
        )
    except EnrichmentError as exc:
        print(f"tailscope analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    options = AnalyzeOptions(
        enrichment=enrichment,
        capture_id=args.capture_id,
        tcp_idle_timeout_s=args.tcp_idle_timeout,
        udp_idle_timeout_s=args.udp_idle_timeout,
        max_flows=args.max_flows,
        checksums=not args.no_checksums,
        keylogs=[str(k) for k in args.keylog],
        pseudonymize_key=str(args.pseudonymize_clients) if args.pseudonymize_clients else None,
        since_ns=since_ns,
        until_ns=until_ns,
        bpf_filter=args.bpf_filter,
        packets=args.packets,
        jobs=args.jobs,
        progress=not args.quiet and not args.json,
        incremental=args.incremental,
        reprocess=args.reprocess,
    )
    if args.jobs is not None and args.jobs <= 0:
        print(f"tailscope analyze: error: --jobs must be positive, got {args.jobs}", file=sys.stderr)
        return EXIT_USAGE
    if args.partitions is not None and args.partitions <= 0:
        print(f"tailscope analyze: error: --partitions must be positive, got {args.partitions}", file=sys.stderr)
        return EXIT_USAGE
    conf = {}
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"tailscope analyze: error: --spark-conf {item!r}: expected KEY=VALUE", file=sys.stderr)
            return EXIT_USAGE
        conf[key] = value
    from tailscope.jobs.dataset.ledger import LedgerError
    from tailscope.jobs.enrichment.pseudonymize import PseudonymKeyError, key_warning

    if args.pseudonymize_clients and (warning := key_warning(args.pseudonymize_clients)):
        print(f"tailscope analyze: warning: {warning}", file=sys.stderr)
    usage_errors = [EnrichmentError, LedgerError, PseudonymKeyError, SelectionError]
    try:
        if args.engine == "spark":
            from tailscope.jobs.run import spark_engine

            usage_errors.append(spark_engine.SparkUnavailable)
            spark_options = spark_engine.SparkOptions(master=args.spark_master, partitions=args.partitions, conf=conf,
                                                      split_captures=args.spark_split_captures)
            result = spark_engine.analyze(args.inputs, args.out, options, spark_options, argv=sys.argv[1:])
        else:
            if batches_pass_through_python(options):
                _skip_pyarrow_pandas_probe()
            result = analyze(args.inputs, args.out, options, argv=sys.argv[1:])
    except tuple(usage_errors) as exc:
        print(f"tailscope analyze: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _compact_after(args, result)
    if args.json:
        import json

        print(json.dumps(result.manifest, indent=2, default=str))
    elif not args.quiet and result.files:  # a run that took nothing says "nothing new" below, no empty table
        print_summary(result, summary_to or sys.stdout)
    for r in result.files:
        if r.error:
            print(f"tailscope: {r.error}", file=sys.stderr)
    totals = result.manifest["totals"]
    already = totals.get("files_already_processed", 0)
    below = totals.get("files_below_horizon", 0)
    said = [f"{already} inputs already in the dataset"] * bool(already)
    said += [f"{below} inputs below the retention horizon (tailscope prune removed their rows)"] * bool(below)
    if said and not args.json:
        if totals["files"] == 0:
            print(f"nothing new: {'; '.join(said)}", file=sys.stdout if not args.quiet else sys.stderr)
            return EXIT_OK
        print(f"skipped {'; '.join(said)} (--reprocess reads them again)", file=sys.stderr)
    if totals["files"] == 0 and said:
        return EXIT_OK
    if totals["files_ok"] == 0 and totals["files_partial"] == 0:
        return EXIT_NOTHING_READ
    if totals["files_partial"] or totals["files_failed"]:
        return EXIT_SOME_INPUTS_FAILED
    return EXIT_OK


def _compact_after(args: argparse.Namespace, result) -> None:
    """`--compact-over N`: a run that committed compacts the partitions holding more than N parts
    (jobs/dataset/compact.py COMPACT_OVER is the default; 0 never). A local dataset only."""
    from tailscope.jobs.dataset import compact
    from tailscope.jobs.dataset.storage import is_url

    over = compact.COMPACT_OVER if args.compact_over is None else args.compact_over
    if over <= 0 or is_url(args.out) or not result.manifest.get("outputs"):
        return
    try:
        compact.compact(args.out, over=over, log=lambda m: print(f"tailscope analyze: {m}", file=sys.stderr))
    except (compact.CompactError, OSError) as exc:
        # the run is committed; its small parts stay until a later compaction
        print(f"tailscope analyze: warning: compaction after the run failed: {exc}", file=sys.stderr)
