-- Q3. What changed since last week?
--
--   SELECT * FROM week_over_week('carrier', '2026-W47');
--   SELECT * FROM week_over_week('hexagon', NULL);          -- latest week vs the one before
--   SELECT * FROM signature_week_over_week('carrier', NULL);
--
-- grain_name: a weekly grain of mart_grains ('week', 'carrier', 'hexagon', 'carrier_hexagon',
-- 'site', 'network_type'); wk: NULL = the latest week. Keys present in only one of the two weeks
-- are kept (the other week's numbers are null), so what appeared or vanished shows too.
-- *_delta = this week − last week; *_change = this week ÷ last week − 1 (0.25 = 25 % worse for
-- latency). The biggest p99 regressions come first.
-- week_pair(src, wk): the rows of the mart named src (a CTE of the caller) in week wk (NULL = the
-- latest week) and in the week before, `is_current` telling which: what both questions compare.
CREATE OR REPLACE MACRO week_pair(src, wk) AS TABLE
SELECT m.*, m.week = coalesce(wk, latest_week()) AS is_current
FROM query_table(src) m
WHERE m.week IN (coalesce(wk, latest_week()), previous_week(coalesce(wk, latest_week())));

CREATE OR REPLACE MACRO week_over_week(grain_name, wk) AS TABLE
WITH m AS (SELECT * FROM latency_mart(grain_name)),
pair AS (SELECT * FROM week_pair('m', wk)),
cur AS (SELECT * FROM pair WHERE is_current),
prev AS (SELECT * FROM pair WHERE NOT is_current)
SELECT
    coalesce(wk, latest_week())                          AS week,
    previous_week(coalesce(wk, latest_week()))           AS previous_week,
    carrier, h3_cell, site, network_type,
    cur.queries                                          AS queries,
    prev.queries                                         AS queries_prev,
    cur.flows                                            AS flows,
    prev.flows                                           AS flows_prev,
    cur.p50_ms                                           AS p50_ms,
    prev.p50_ms                                          AS p50_ms_prev,
    cur.p50_ms - prev.p50_ms                             AS p50_ms_delta,
    cur.p95_ms                                           AS p95_ms,
    prev.p95_ms                                          AS p95_ms_prev,
    cur.p95_ms - prev.p95_ms                             AS p95_ms_delta,
    cur.p99_ms                                           AS p99_ms,
    prev.p99_ms                                          AS p99_ms_prev,
    cur.p99_ms - prev.p99_ms                             AS p99_ms_delta,
    cur.p99_ms / nullif(prev.p99_ms, 0) - 1              AS p99_change,
    cur.lossy_flow_share                                 AS lossy_flow_share,
    prev.lossy_flow_share                                AS lossy_flow_share_prev,
    cur.lossy_flow_share - prev.lossy_flow_share         AS lossy_flow_share_delta,
    cur.signature_rate                                   AS signature_rate,
    prev.signature_rate                                  AS signature_rate_prev,
    cur.signature_rate - prev.signature_rate             AS signature_rate_delta
FROM cur
FULL OUTER JOIN prev USING (carrier, h3_cell, site, network_type)
ORDER BY p99_ms_delta DESC NULLS LAST, p99_ms DESC NULLS LAST, carrier, h3_cell, site, network_type;

-- Per key and signature: how its tail share and charged delay moved from last week to this one.
CREATE OR REPLACE MACRO signature_week_over_week(grain_name, wk) AS TABLE
WITH m AS (SELECT * FROM signature_mart(grain_name)),
pair AS (SELECT * FROM week_pair('m', wk)),
cur AS (SELECT * FROM pair WHERE is_current),
prev AS (SELECT * FROM pair WHERE NOT is_current)
SELECT
    coalesce(wk, latest_week())                          AS week,
    previous_week(coalesce(wk, latest_week()))           AS previous_week,
    carrier, h3_cell, site, network_type, signature,
    cur.rate                                             AS rate,
    prev.rate                                            AS rate_prev,
    cur.rate - prev.rate                                 AS rate_delta,
    cur.tail_rate                                        AS tail_rate,
    prev.tail_rate                                       AS tail_rate_prev,
    cur.tail_rate - prev.tail_rate                       AS tail_rate_delta,
    cur.delay_ms                                         AS delay_ms,
    prev.delay_ms                                        AS delay_ms_prev,
    cur.delay_ms - prev.delay_ms                         AS delay_ms_delta,
    cur.tail_delay_ms                                    AS tail_delay_ms,
    prev.tail_delay_ms                                   AS tail_delay_ms_prev,
    cur.tail_delay_ms - prev.tail_delay_ms               AS tail_delay_ms_delta,
    cur.tail_delay_share                                 AS tail_delay_share,
    prev.tail_delay_share                                AS tail_delay_share_prev
FROM cur
FULL OUTER JOIN prev USING (carrier, h3_cell, site, network_type, signature)
ORDER BY abs(coalesce(cur.tail_delay_ms, 0) - coalesce(prev.tail_delay_ms, 0)) DESC, carrier, h3_cell, site, network_type, signature;
