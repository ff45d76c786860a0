-- signature_mart(grain): per period, key of the grain (see mart_grains) and signature, how often
-- the signature struck the complete queries and the delay it is charged with — over all the key's
-- queries and over its p99 tail. The same numbers as the `all` and `p99` levels of
-- `tailscope stats` attribution (docs/stats.md), for every key at once:
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
    SELECT *,
        list_concat(list_concat(signatures, CASE WHEN setup_ns > 0 THEN ['(connection setup)'] ELSE [] END),
                    CASE WHEN len(signatures) = 0 THEN ['(none)'] ELSE [] END) AS sig_list
    FROM query_slices
    WHERE grain = grain_name
),
g AS (
    SELECT grain, period, period_start, week, carrier, h3_cell, site, network_type,
           count(*)                         AS queries,
           sum(latency_ns)                  AS latency_sum,
           quantile_disc(latency_ns, 0.99)  AS p99_ns
    FROM s
    GROUP BY grain, period, period_start, week, carrier, h3_cell, site, network_type
),
t AS (
    SELECT s.*, g.queries, g.latency_sum, g.p99_ns, s.latency_ns >= g.p99_ns AS in_tail
    FROM s JOIN g USING (grain, period, period_start, week, carrier, h3_cell, site, network_type)
),
tail AS (
    SELECT grain, period, period_start, week, carrier, h3_cell, site, network_type,
           count(*) FILTER (WHERE in_tail)              AS tail_queries,
           sum(latency_ns) FILTER (WHERE in_tail)       AS tail_latency_sum
    FROM t
    GROUP BY grain, period, period_start, week, carrier, h3_cell, site, network_type
),
sigs AS (
    SELECT DISTINCT grain, period, period_start, week, carrier, h3_cell, site, network_type, u.signature
    FROM t, unnest(t.sig_list) AS u(signature)
),
pairs AS (
    SELECT
        sigs.*, t.latency_ns, t.in_tail, t.queries, t.latency_sum, t.p99_ns,
        list_contains(t.sig_list, sigs.signature) AS has,
        CASE WHEN sigs.signature = '(none)' THEN NULL
             WHEN sigs.signature = '(connection setup)' THEN t.setup_ns
             ELSE coalesce(list_sum([d.delay_ns FOR d IN t.delays IF d.signature = sigs.signature]), 0)
        END AS delay_ns
    FROM sigs
    JOIN t USING (grain, period, period_start, week, carrier, h3_cell, site, network_type)
)
SELECT
    p.grain, p.period, p.period_start, p.week, p.carrier, p.h3_cell, p.site, p.network_type,
    p.signature,
    any_value(p.queries)                                                    AS queries,
    CAST(any_value(p.latency_sum) AS DOUBLE) / 1e6                          AS latency_sum_ms,
    count(*) FILTER (WHERE p.has)                                           AS queries_with,
    count(*) FILTER (WHERE p.has) / any_value(p.queries)                    AS rate,
    CASE WHEN p.signature <> '(none)' THEN coalesce(CAST(sum(p.delay_ns) FILTER (WHERE p.has) AS DOUBLE), 0) / 1e6
    END                                                                     AS delay_ms,
    CASE WHEN p.signature <> '(none)' THEN coalesce(sum(p.delay_ns) FILTER (WHERE p.has), 0) / nullif(any_value(p.latency_sum), 0)
    END                                                                     AS delay_share,
    median(p.latency_ns) FILTER (WHERE p.has) / 1e6                         AS median_with_ms,
    median(p.latency_ns) FILTER (WHERE NOT p.has) / 1e6                     AS median_without_ms,
    any_value(p.p99_ns) / 1e6                                               AS p99_ms,
    any_value(tail.tail_queries)                                            AS tail_queries,
    count(*) FILTER (WHERE p.has AND p.in_tail)                             AS tail_with,
    count(*) FILTER (WHERE p.has AND p.in_tail) / any_value(tail.tail_queries) AS tail_rate,
    CASE WHEN p.signature <> '(none)' THEN coalesce(CAST(sum(p.delay_ns) FILTER (WHERE p.has AND p.in_tail) AS DOUBLE), 0) / 1e6
    END                                                                     AS tail_delay_ms,
    CASE WHEN p.signature <> '(none)' THEN coalesce(sum(p.delay_ns) FILTER (WHERE p.has AND p.in_tail), 0) / nullif(any_value(tail.tail_latency_sum), 0)
    END                                                                     AS tail_delay_share,
    (count(*) FILTER (WHERE p.has AND p.in_tail) / any_value(tail.tail_queries))
        / (count(*) FILTER (WHERE p.has) / any_value(p.queries))            AS lift
FROM pairs p
JOIN tail USING (grain, period, period_start, week, carrier, h3_cell, site, network_type)
GROUP BY p.grain, p.period, p.period_start, p.week, p.carrier, p.h3_cell, p.site, p.network_type, p.signature;

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
