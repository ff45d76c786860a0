-- QUIC vs TCP, defined once (docs/stats.md#quic-vs-tcp): `tailscope stats --table quic_vs_tcp`, the
-- report's QUIC vs TCP section, the QUIC vs TCP dashboard and mart_quic_vs_tcp all call
-- quic_vs_tcp(); tests/test_one_definition.py fails if another file computes the tail reduction.
-- Latency is query_facts' (a connection's first query includes its setup where the core measured
-- one), percentiles nearest-rank (quantile_disc), the p99 tail that of tail_attribution (015).

-- The settings, one place each:
--   resamples   (bootstrap_resamples) bootstrap resamples of the tail reduction's confidence interval: 2000 puts the
--               2.5 % and 97.5 % points 50 resamples from the ends (their Monte Carlo error is
--               well under the interval's width at any sample size)
--   seed        (bootstrap_seed) the bootstrap's random numbers are a function of (seed, resample): the same data
--               give the same interval, on any DuckDB and any number of threads
--   min_queries a comparison is flagged small_sample when either transport has fewer complete
--               queries: under 500 the p99 tail holds at most 5 queries (nearest rank, ⌈0.01·n⌉),
--               so one slow query moves the p99; the interval says how much
--   session_gap_ns  a client's connections to one server address form one session while each
--               starts within 30 s of the session's last activity (quic_fallback's pairing window:
--               a TCP connection later than that is no longer the same attempt)
CREATE OR REPLACE MACRO bootstrap_resamples() AS 2000;
CREATE OR REPLACE MACRO bootstrap_seed() AS 20261126;
-- (every bootstrap of the marts uses those two: the QUIC tail reduction here, what_changed in 080)
CREATE OR REPLACE MACRO quic_vs_tcp_resamples() AS bootstrap_resamples();
CREATE OR REPLACE MACRO quic_vs_tcp_seed() AS bootstrap_seed();
CREATE OR REPLACE MACRO quic_vs_tcp_min_queries() AS 500;
CREATE OR REPLACE MACRO session_gap_ns() AS 30000000000;

-- Loss signatures: what a query is charged for recovering lost packets (TCP's retransmissions by
-- cause, SYN/SYN-ACK loss, the policer's drops; QUIC's re-sends by loss trigger and Initial
-- losses). Not loss: reordering, zero window, bufferbloat, connection setup, QUIC migration.
CREATE OR REPLACE MACRO is_loss_signature(sig) AS
    sig IN ('syn_loss', 'synack_loss', 'tail_loss', 'rto', 'fast_retransmit', 'tlp', 'spurious_retransmission',
            'retransmission', 'policing')
    OR (starts_with(sig, 'quic_') AND sig NOT IN ('quic_reordering', 'quic_migration'));

-- A uniform number in (0, 1) for (seed, resample b, stream): Wellons' lowbias32 integer hash,
-- applied twice, in plain 64-bit arithmetic (no engine RNG, whose sequence depends on threads and
-- versions). tests/test_quic_vs_tcp.py recomputes it in Python.
CREATE OR REPLACE MACRO lowbias32_step(v, s, m) AS (xor(v, v >> s) * m) % 4294967296;
CREATE OR REPLACE MACRO lowbias32(x) AS
    xor(lowbias32_step(lowbias32_step(CAST(x AS UBIGINT) % 4294967296, 16, 2146121005), 15, 2221713035),
        lowbias32_step(lowbias32_step(CAST(x AS UBIGINT) % 4294967296, 16, 2146121005), 15, 2221713035) >> 16);
CREATE OR REPLACE MACRO bootstrap_uniform(seed, b, stream) AS
    (lowbias32(lowbias32((CAST(seed AS UBIGINT) * 1000003 + CAST(b AS UBIGINT) * 2 + stream) % 4294967296)) + 0.5)
    / 4294967296.0;

-- bootstrap_quantile(src, resamples, seed): the percentile bootstrap of a nearest-rank quantile,
-- defined once (quic_vs_tcp below, what_changed in 080_what_changed.sql). src names a relation
-- with grp (any type), stream (0 or 1: samples resampled independently, e.g. 0 TCP and 1 QUIC, or
-- 0 last week and 1 this week), level (the quantile), size (how many values a resample draws:
-- the sample's count n for the plain bootstrap, fewer for an effective sample size, see
-- what_changed) - level and size constant per grp and stream - and latency_ns. One row per grp,
-- stream and resample b (0 .. resamples-1): latency_ns = that resample's level quantile.
--
-- Each resample's quantile is drawn from its exact distribution instead of materialising the
-- resample: with a sample's n latencies ranked x_1 <= ... <= x_n, a resample of N draws and
-- K = ⌈level·N⌉ (the nearest rank quantile_disc takes), a resample's quantile is its K-th smallest
-- draw, which is at most x_j exactly when at most M = N - K of the N draws rank above j:
-- P = P(Binomial(N, (n-j)/n) <= M). Each resample's quantile is x_J with J the smallest rank whose
-- P reaches a uniform number (bootstrap_uniform(seed, b, stream)). That is what resampling N values
-- and taking the quantile gives, in O(n) work instead of O(resamples·N). Left out, as they change P
-- by under 1e-12: ranks more than max((3M + 10·sqrt(M+1) + 30)·n/N, reach) below ⌈level·n⌉ or
-- reach above it (reach = 10·n·sqrt(level·(1-level)/N) + 30: ten spreads of J), and binomial terms
-- more than 10 standard deviations + 30 below their mean (what keeps a median's bootstrap O(n)).
CREATE OR REPLACE MACRO bootstrap_quantile(src, resamples, seed) AS TABLE
WITH ranked AS (
    SELECT grp, stream, level, size, latency_ns,
           row_number() OVER (PARTITION BY grp, stream ORDER BY latency_ns) AS j,
           count(*) OVER (PARTITION BY grp, stream)                         AS n
    FROM query_table(src)
),
sizes AS (
    SELECT grp, stream, n, big_n, big_n - big_k AS big_m,
           greatest(1, CAST(ceil(level * n - 1e-9) AS BIGINT))                                   AS k,
           CAST(ceil(10 * n * sqrt(level * (1 - level) / big_n)) AS BIGINT) + 30                 AS reach
    FROM (SELECT DISTINCT grp, stream, n, level, big_n,
                 greatest(1, CAST(ceil(level * big_n - 1e-9) AS BIGINT)) AS big_k
          FROM (SELECT grp, stream, n, level, greatest(1, least(n, CAST(round(size) AS BIGINT))) AS big_n FROM ranked))
),
ranks AS (
    SELECT grp, stream, n, big_n, big_m,
           unnest(range(greatest(1, least(n - CAST(ceil((3 * big_m + 30 + ceil(10 * sqrt(big_m + 1))) * n / big_n) AS BIGINT),
                                          k - reach)),
                        least(n, k + reach + 1))) AS j
    FROM sizes
),
terms AS (
    SELECT grp, stream, n, big_n, j,
           unnest(range(greatest(0, CAST(floor(big_n * (n - j) / n - 10 * sqrt(big_n * (n - j) * j / n / n) - 30) AS BIGINT)),
                        big_m + 1)) AS i
    FROM ranks
),
cdf AS (
    SELECT grp, stream, j,
           sum(exp(lgamma(big_n + 1) - lgamma(i + 1) - lgamma(big_n - i + 1) + i * ln((n - j) / n) + (big_n - i) * ln(j / n))) AS p
    FROM terms GROUP BY ALL
    UNION ALL
    SELECT grp, stream, n AS j, 1.0 AS p FROM sizes
),
steps AS (    -- monotone (rounding), one row per distinct level: the ASOF match is then unique
    SELECT grp, stream, p, min(j) AS j
    FROM (SELECT grp, stream, j, max(p) OVER (PARTITION BY grp, stream ORDER BY j) AS p FROM cdf)
    GROUP BY ALL
),
draws AS (
    SELECT s.grp, s.stream, r.b, bootstrap_uniform(seed, r.b, s.stream) AS u
    FROM sizes s CROSS JOIN range(resamples) AS r(b)
)
SELECT d.grp, d.stream, d.b, x.latency_ns
FROM draws d
ASOF JOIN steps st ON d.grp = st.grp AND d.stream = st.stream AND d.u <= st.p
JOIN ranked x ON x.grp = d.grp AND x.stream = d.stream AND x.j = st.j;

-- client_sessions: a client's connections to one server address (QUIC attempts and TCP connections
-- to web ports, as quic_fallback takes them), split where one starts more than session_gap_ns()
-- after the latest end so far. mixed: the session used both transports (a fallback, a race, or a
-- client that remembered QUIC as broken). A session belongs to the slice of its first connection.
CREATE OR REPLACE VIEW client_sessions AS
WITH c AS (
    SELECT flow_id, client_ip, server_ip, start_ns, end_ns, 'quic' AS protocol FROM quic_attempts
    UNION ALL
    SELECT flow_id, client_ip, server_ip, start_ns, end_ns, 'tcp' AS protocol FROM tcp_connections
),
o AS (
    SELECT *, max(end_ns) OVER (PARTITION BY client_ip, server_ip ORDER BY start_ns, flow_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM c
),
s AS (
    SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR start_ns > prev_end_ns + session_gap_ns() THEN 1 ELSE 0 END)
                  OVER (PARTITION BY client_ip, server_ip ORDER BY start_ns, flow_id) AS session_no
    FROM o
)
SELECT
    client_ip,
    server_ip,
    session_no,
    arg_min(flow_id, start_ns)                                   AS first_flow_id,
    count(*)                                                     AS connections,
    count(*) FILTER (WHERE protocol = 'quic')                    AS quic_connections,
    count(*) FILTER (WHERE protocol = 'tcp')                     AS tcp_connections,
    count(*) FILTER (WHERE protocol = 'quic') > 0 AND count(*) FILTER (WHERE protocol = 'tcp') > 0 AS mixed
FROM s
GROUP BY client_ip, server_ip, session_no;

-- quic_vs_tcp(qsrc, fsrc): QUIC and TCP side by side per group. qsrc names a relation of complete
-- queries with query_facts' columns grp, protocol, latency_ns, signatures, delays and the
-- budget_*_ns columns; fsrc one of
-- flows with flow_facts' grp, flow_id, protocol, handshake_rtt_ms, quic_handshake_rtt_ms (grp: any
-- type, e.g. a STRUCT of slice keys). One row per group, for each transport (quic_*, tcp_*):
--   queries, p50_ms / p95_ms / p99_ms      complete queries and their latency percentiles
--   setup_p50_ms                           median connection setup of first queries that carry one
--                                          (TCP: first SYN to the first request byte)
--   tail_queries, tail_loss_rate           the p99 tail (tail_attribution) and the share of it
--                                          carrying a loss signature (is_loss_signature)
--   tail_loss_share                        the share of the tail's time in the time budget's loss parts
--                                          (budget_parts.is_loss; <= 1)
--   tail_loss_charged_ratio                (secondary) delay charged to loss signatures in the tail ÷ the tail's
--                                          latency (overlapping retransmissions each charged)
--   flows, handshake_rtt_p50_ms            connections; median handshake RTT at the server (TCP:
--                                          SYN-ACK to ACK; QUIC: the server's first flight to the
--                                          client's reply, RFC 9312) - the path's RTT, one each
-- and for both:
--   tail_reduction                         1 - quic_p99_ms / tcp_p99_ms (0.2: QUIC's p99 is 20 % lower)
--   tail_reduction_low / _high             its 95 % percentile-bootstrap interval: each transport's
--                                          queries resampled with replacement, quic_vs_tcp_resamples()
--                                          times; see below
--   small_sample, small_sample_below       either transport has fewer complete queries than
--                                          small_sample_below (= quic_vs_tcp_min_queries())
--   quic_attempts, quic_ended_on_tcp, fallback_share   QUIC attempts of the group's flows and those
--                                          whose session ended on TCP (quic_fallback.ended_on_tcp)
--   sessions, mixed_sessions, mixed_session_share      client_sessions begun by the group's flows
--
-- The interval is bootstrap_quantile's (above) at level 0.99, stream 0 TCP and 1 QUIC: the two
-- samples are resampled independently; each resample's reduction is 1 - its QUIC p99 / its TCP p99.
CREATE OR REPLACE MACRO quic_vs_tcp(qsrc, fsrc) AS TABLE
-- q and f are read several times below: MATERIALIZED reads the sources (views over Parquet) once
WITH q AS MATERIALIZED (
    SELECT grp, protocol, latency_ns, setup_ns, signatures, delays, COLUMNS('^budget_.*_ns$')
    FROM query_table(qsrc) WHERE protocol IN ('quic', 'tcp')
),
f AS MATERIALIZED (
    SELECT grp, flow_id, protocol, handshake_rtt_ms, quic_handshake_rtt_ms
    FROM query_table(fsrc) WHERE protocol IN ('quic', 'tcp')
),
lat AS (
    SELECT grp,
        count(*) FILTER (WHERE protocol = 'quic')                                          AS quic_queries,
        quantile_disc(latency_ns, 0.5) FILTER (WHERE protocol = 'quic') / 1e6               AS quic_p50_ms,
        quantile_disc(latency_ns, 0.95) FILTER (WHERE protocol = 'quic') / 1e6              AS quic_p95_ms,
        quantile_disc(latency_ns, 0.99) FILTER (WHERE protocol = 'quic') / 1e6              AS quic_p99_ms,
        quantile_disc(setup_ns, 0.5) FILTER (WHERE protocol = 'quic' AND setup_ns > 0) / 1e6 AS quic_setup_p50_ms,
        count(*) FILTER (WHERE protocol = 'tcp')                                           AS tcp_queries,
        quantile_disc(latency_ns, 0.5) FILTER (WHERE protocol = 'tcp') / 1e6                AS tcp_p50_ms,
        quantile_disc(latency_ns, 0.95) FILTER (WHERE protocol = 'tcp') / 1e6               AS tcp_p95_ms,
        quantile_disc(latency_ns, 0.99) FILTER (WHERE protocol = 'tcp') / 1e6               AS tcp_p99_ms,
        quantile_disc(setup_ns, 0.5) FILTER (WHERE protocol = 'tcp' AND setup_ns > 0) / 1e6  AS tcp_setup_p50_ms
    FROM q GROUP BY grp
),
-- the loss signatures of each query as one pseudo-signature, for tail_attribution
lq AS (
    SELECT struct_pack(grp := grp, protocol := protocol) AS grp, latency_ns, 0 AS setup_ns,
           CASE WHEN len([s FOR s IN signatures IF is_loss_signature(s)]) > 0 THEN ['(loss)'] ELSE [] END AS signatures,
           [struct_pack(signature := '(loss)', delay_ns := d.delay_ns) FOR d IN delays IF is_loss_signature(d.signature)] AS delays
    FROM q
),
tl AS (
    SELECT grp.grp AS grp, grp.protocol AS protocol,
           any_value(tail_queries)                                                    AS tail_queries,
           any_value(tail_latency_ns)                                                 AS tail_latency_ns,
           coalesce(max(queries_with) FILTER (WHERE signature = '(loss)'), 0)          AS tail_loss_queries,
           coalesce(max(delay_ns) FILTER (WHERE signature = '(loss)'), 0)              AS tail_loss_delay_ns
    FROM tail_attribution('lq', 0.99) GROUP BY ALL
),
-- the share of each p99 tail's time spent in loss recovery: the time budget's loss parts
lb AS (
    SELECT struct_pack(grp := grp, protocol := protocol) AS grp, latency_ns, COLUMNS('^budget_.*_ns$') FROM q
),
tlb AS (
    SELECT grp.grp AS grp, grp.protocol AS protocol, sum(share) FILTER (WHERE part IN (SELECT part FROM budget_parts WHERE is_loss)) AS loss_share
    FROM tail_budget('lb', 0.99) GROUP BY ALL
),
tail AS (
    SELECT grp,
        any_value(tail_queries) FILTER (WHERE protocol = 'quic')                            AS quic_tail_queries,
        any_value(tail_loss_queries / tail_queries) FILTER (WHERE protocol = 'quic')        AS quic_tail_loss_rate,
        any_value(tail_loss_delay_ns / nullif(tail_latency_ns, 0)) FILTER (WHERE protocol = 'quic') AS quic_tail_loss_charged_ratio,
        any_value(tail_queries) FILTER (WHERE protocol = 'tcp')                             AS tcp_tail_queries,
        any_value(tail_loss_queries / tail_queries) FILTER (WHERE protocol = 'tcp')         AS tcp_tail_loss_rate,
        any_value(tail_loss_delay_ns / nullif(tail_latency_ns, 0)) FILTER (WHERE protocol = 'tcp') AS tcp_tail_loss_charged_ratio
    FROM tl GROUP BY grp
),
-- the bootstrap (bootstrap_quantile, above): each transport's queries resampled, stream 0 TCP, 1 QUIC,
-- in the groups that have both
bq AS (
    SELECT grp, CASE protocol WHEN 'tcp' THEN 0 ELSE 1 END AS stream, 0.99 AS level,
           count(*) OVER (PARTITION BY grp, protocol) AS size, latency_ns
    FROM q WHERE grp IN (SELECT grp FROM q GROUP BY grp HAVING count(DISTINCT protocol) = 2)
),
picked AS (
    SELECT grp, CASE stream WHEN 0 THEN 'tcp' ELSE 'quic' END AS protocol, b, latency_ns
    FROM bootstrap_quantile('bq', quic_vs_tcp_resamples(), quic_vs_tcp_seed())
),
boot AS (
    SELECT grp, b,
           1 - any_value(latency_ns) FILTER (WHERE protocol = 'quic')
               / nullif(CAST(any_value(latency_ns) FILTER (WHERE protocol = 'tcp') AS DOUBLE), 0) AS r
    FROM picked GROUP BY grp, b
),
ci AS (
    SELECT grp, quantile_disc(r, 0.025) AS tail_reduction_low, quantile_disc(r, 0.975) AS tail_reduction_high
    FROM boot GROUP BY grp
),
fl AS (
    SELECT grp,
        count(*) FILTER (WHERE protocol = 'quic')                                          AS quic_flows,
        quantile_disc(quic_handshake_rtt_ms, 0.5) FILTER (WHERE protocol = 'quic')          AS quic_handshake_rtt_p50_ms,
        count(*) FILTER (WHERE protocol = 'tcp')                                           AS tcp_flows,
        quantile_disc(handshake_rtt_ms, 0.5) FILTER (WHERE protocol = 'tcp')                AS tcp_handshake_rtt_p50_ms
    FROM f GROUP BY grp
),
fb AS (
    SELECT f.grp, count(*) AS quic_attempts, count(*) FILTER (WHERE a.ended_on_tcp) AS quic_ended_on_tcp
    FROM f JOIN quic_fallback a ON a.quic_flow_id = f.flow_id
    GROUP BY f.grp
),
ss AS (
    SELECT f.grp, count(*) AS sessions, count(*) FILTER (WHERE s.mixed) AS mixed_sessions
    FROM f JOIN client_sessions s ON s.first_flow_id = f.flow_id
    GROUP BY f.grp
),
keys AS (
    SELECT grp FROM lat UNION SELECT grp FROM fl
)
SELECT
    k.grp,
    coalesce(lat.quic_queries, 0)                                                  AS quic_queries,
    coalesce(lat.tcp_queries, 0)                                                   AS tcp_queries,
    lat.quic_p50_ms, lat.quic_p95_ms, lat.quic_p99_ms,
    lat.tcp_p50_ms, lat.tcp_p95_ms, lat.tcp_p99_ms,
    1 - lat.quic_p99_ms / nullif(lat.tcp_p99_ms, 0)                                AS tail_reduction,
    ci.tail_reduction_low,
    ci.tail_reduction_high,
    least(coalesce(lat.quic_queries, 0), coalesce(lat.tcp_queries, 0)) < quic_vs_tcp_min_queries() AS small_sample,
    quic_vs_tcp_min_queries()                                                      AS small_sample_below,
    coalesce(tail.quic_tail_queries, 0)                                            AS quic_tail_queries,
    tail.quic_tail_loss_rate,
    (SELECT loss_share FROM tlb WHERE tlb.grp = k.grp AND tlb.protocol = 'quic')  AS quic_tail_loss_share,
    tail.quic_tail_loss_charged_ratio,
    coalesce(tail.tcp_tail_queries, 0)                                             AS tcp_tail_queries,
    tail.tcp_tail_loss_rate,
    (SELECT loss_share FROM tlb WHERE tlb.grp = k.grp AND tlb.protocol = 'tcp')   AS tcp_tail_loss_share,
    tail.tcp_tail_loss_charged_ratio,
    lat.quic_setup_p50_ms,
    lat.tcp_setup_p50_ms,
    coalesce(fl.quic_flows, 0)                                                     AS quic_flows,
    coalesce(fl.tcp_flows, 0)                                                      AS tcp_flows,
    fl.quic_handshake_rtt_p50_ms,
    fl.tcp_handshake_rtt_p50_ms,
    coalesce(fb.quic_attempts, 0)                                                  AS quic_attempts,
    coalesce(fb.quic_ended_on_tcp, 0)                                              AS quic_ended_on_tcp,
    fb.quic_ended_on_tcp / nullif(fb.quic_attempts, 0)                             AS fallback_share,
    coalesce(ss.sessions, 0)                                                       AS sessions,
    coalesce(ss.mixed_sessions, 0)                                                 AS mixed_sessions,
    ss.mixed_sessions / nullif(ss.sessions, 0)                                     AS mixed_session_share
FROM keys k
LEFT JOIN lat ON lat.grp = k.grp
LEFT JOIN tail ON tail.grp = k.grp
LEFT JOIN ci ON ci.grp = k.grp
LEFT JOIN fl ON fl.grp = k.grp
LEFT JOIN fb ON fb.grp = k.grp
LEFT JOIN ss ON ss.grp = k.grp;

-- mart_quic_vs_tcp: quic_vs_tcp per ISO week and slice - grain 'week' (all traffic), 'carrier',
-- 'hexagon', 'network_type' (mart_grains; keys a grain does not use read '*').
CREATE OR REPLACE VIEW mart_quic_vs_tcp AS
WITH qs AS (
    SELECT struct_pack(grain := grain, week := week, period_start := period_start, carrier := carrier,
                       h3_cell := h3_cell, network_type := network_type) AS grp,
           protocol, latency_ns, setup_ns, signatures, delays, COLUMNS('^budget_.*_ns$')
    FROM query_slices WHERE grain IN ('week', 'carrier', 'hexagon', 'network_type')
),
fs AS (
    SELECT struct_pack(grain := grain, week := week, period_start := period_start, carrier := carrier,
                       h3_cell := h3_cell, network_type := network_type) AS grp,
           flow_id, protocol, handshake_rtt_ms, quic_handshake_rtt_ms
    FROM flow_slices WHERE grain IN ('week', 'carrier', 'hexagon', 'network_type')
)
SELECT grp.grain AS grain, grp.week AS week, grp.period_start AS period_start, grp.carrier AS carrier,
       grp.h3_cell AS h3_cell, grp.network_type AS network_type, * EXCLUDE (grp)
FROM quic_vs_tcp('qs', 'fs');
