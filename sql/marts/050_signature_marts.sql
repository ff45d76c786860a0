-- signature_mart(grain): per period, key of the grain (see mart_grains) and signature, how often
-- the signature struck the complete queries and the delay it is charged with — over all the key's
-- queries and over its p99 tail: tail_attribution (015_attribution.sql) at levels 0 and 0.99, the
-- `all` and `p99` levels of `tailscope stats` attribution (docs/stats.md), for every key at once:
--   queries, latency_sum_ms        the key's queries and their summed latency
--   queries_with, rate             queries carrying the signature, and their share
--   delay_ms, delay_share          delay charged to it (sum of its `delays` entries) and that ÷ latency_sum_ms
--   median_with_ms / median_without_ms   median latency of the queries with / without it
--   p99_ms                         the key's p99 latency (nearest rank); the tail = queries at or above it
--   tail_queries, tail_with, tail_rate, tail_delay_ms, tail_delay_share (÷ the tail's summed latency)
--   lift                           tail_rate ÷ rate: > 1 when the signature is over-represented in the tail
-- Pseudo-signatures, as in `tailscope stats`: '(connection setup)' — first queries whose setup took
-- time, charged setup_ns; '(none)' — queries carrying no signature (its delay columns are null).
-- Cautions (docs/stats.md): a retransmission is charged the whole time since its bytes were first
-- sent and overlapping ones are each charged, so delay shares can add up to more than 100 %;
-- with/without medians show association, not cause; a tail of a handful of queries is anecdotal.
CREATE OR REPLACE MACRO signature_mart(grain_name) AS TABLE
WITH s AS (
    SELECT struct_pack(grain, period, period_start, week, carrier, h3_cell, site, network_type) AS grp,
           latency_ns, setup_ns, signatures, delays
    FROM query_slices
    WHERE grain = grain_name
),
every AS (SELECT * FROM tail_attribution('s', 0)),
p99 AS (SELECT * FROM tail_attribution('s', 0.99)),
p99_group AS (SELECT DISTINCT grp, threshold_ns, tail_queries, tail_latency_ns FROM p99)
SELECT
    a.grp.grain, a.grp.period, a.grp.period_start, a.grp.week, a.grp.carrier, a.grp.h3_cell, a.grp.site,
    a.grp.network_type,
    a.signature,
    a.tail_queries                                                          AS queries,
    CAST(a.tail_latency_ns AS DOUBLE) / 1e6                                 AS latency_sum_ms,
    a.queries_with                                                          AS queries_with,
    a.queries_with / a.tail_queries                                         AS rate,
    CAST(a.delay_ns AS DOUBLE) / 1e6                                        AS delay_ms,
    a.delay_ns / nullif(a.tail_latency_ns, 0)                               AS delay_share,
    a.median_with_ns / 1e6                                                  AS median_with_ms,
    a.median_without_ns / 1e6                                               AS median_without_ms,
    g.threshold_ns / 1e6                                                    AS p99_ms,
    g.tail_queries                                                          AS tail_queries,
    coalesce(t.queries_with, 0)                                             AS tail_with,
    coalesce(t.queries_with, 0) / g.tail_queries                            AS tail_rate,
    CASE WHEN a.signature <> '(none)' THEN CAST(coalesce(t.delay_ns, 0) AS DOUBLE) / 1e6 END AS tail_delay_ms,
    CASE WHEN a.signature <> '(none)' THEN coalesce(t.delay_ns, 0) / nullif(g.tail_latency_ns, 0) END AS tail_delay_share,
    (coalesce(t.queries_with, 0) / g.tail_queries) / (a.queries_with / a.tail_queries) AS lift
FROM every a
JOIN p99_group g USING (grp)
LEFT JOIN p99 t USING (grp, signature);

-- The named signature marts: signature_mart at one grain each.
CREATE OR REPLACE VIEW mart_week_signatures AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, site, network_type) FROM signature_mart('week');

CREATE OR REPLACE VIEW mart_carrier_signatures AS
SELECT * EXCLUDE (grain, period, h3_cell, site, network_type) FROM signature_mart('carrier');

CREATE OR REPLACE VIEW mart_hexagon_signatures AS
SELECT * EXCLUDE (grain, period, carrier, site, network_type) FROM signature_mart('hexagon');

CREATE OR REPLACE VIEW mart_carrier_hexagon_signatures AS
SELECT * EXCLUDE (grain, period, site, network_type) FROM signature_mart('carrier_hexagon');

CREATE OR REPLACE VIEW mart_site_signatures AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, network_type) FROM signature_mart('site');

CREATE OR REPLACE VIEW mart_hour_signatures AS
SELECT period_start AS hour, * EXCLUDE (grain, period, period_start, carrier, h3_cell, site, network_type)
FROM signature_mart('hour');
