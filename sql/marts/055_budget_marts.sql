-- budget_mart(grain): where the time of each slice's queries went, per period and key of the grain
-- (see mart_grains) and part of the time budget (016_budget.sql), at the levels of `tailscope
-- stats`: 'all' (every query), 'p50', 'p95', 'p99' (the queries at or above that percentile):
--   level, ord, part, label
--   threshold_ms                   the level's percentile (nearest rank); NULL-free, 0 for 'all'
--   tail_queries, tail_latency_ms  the level's queries and their summed latency
--   part_ms, share                 the part's time summed over them, and ÷ tail_latency_ms: <= 1,
--                                  the shares of a level's 16 parts sum to 1
--   mean_ms                        the part's mean time per query of the level
--   queries_with                   queries of the level that spent time in the part
--   without_ms, saved_ms           what if: the level's percentile with the part removed from every
--                                  query's latency, and threshold_ms - that (level 'all': the mean)
-- The primary "where did the tail's time go" figure of the report, stats and dashboards; the
-- signature marts (050) keep the overlapping charged delay as a secondary view.
CREATE OR REPLACE MACRO budget_mart(grain_name) AS TABLE
WITH s AS MATERIALIZED (
    SELECT struct_pack(grain, period, period_start, week, carrier, h3_cell, site, network_type) AS grp,
           latency_ns, COLUMNS('^budget_.*_ns$')
    FROM query_slices
    WHERE grain = grain_name
),
b AS (
    SELECT 'all' AS level, * FROM tail_budget('s', 0)
    UNION ALL SELECT 'p50' AS level, * FROM tail_budget('s', 0.5)
    UNION ALL SELECT 'p95' AS level, * FROM tail_budget('s', 0.95)
    UNION ALL SELECT 'p99' AS level, * FROM tail_budget('s', 0.99)
),
w AS (
    SELECT 'p50' AS level, * FROM budget_what_if('s', 0.5)
    UNION ALL SELECT 'p95' AS level, * FROM budget_what_if('s', 0.95)
    UNION ALL SELECT 'p99' AS level, * FROM budget_what_if('s', 0.99)
)
SELECT
    b.grp.grain, b.grp.period, b.grp.period_start, b.grp.week, b.grp.carrier, b.grp.h3_cell, b.grp.site,
    b.grp.network_type,
    b.level, b.ord, b.part, b.label,
    CASE WHEN b.level = 'all' THEN 0 ELSE b.threshold_ns / 1e6 END          AS threshold_ms,
    b.tail_queries,
    CAST(b.tail_latency_ns AS DOUBLE) / 1e6                                 AS tail_latency_ms,
    CAST(b.part_ns AS DOUBLE) / 1e6                                         AS part_ms,
    b.share,
    b.mean_ns / 1e6                                                         AS mean_ms,
    b.queries_with,
    CASE WHEN b.level = 'all' THEN (b.tail_latency_ns - b.part_ns) / b.tail_queries / 1e6
         ELSE w.without_ns / 1e6 END                                        AS without_ms,
    CASE WHEN b.level = 'all' THEN b.mean_ns / 1e6 ELSE w.saved_ns / 1e6 END AS saved_ms
FROM b
LEFT JOIN w ON w.grp = b.grp AND w.level = b.level AND w.part = b.part;

-- The named budget marts: budget_mart at one grain each.
CREATE OR REPLACE VIEW mart_week_budget AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, site, network_type) FROM budget_mart('week');

CREATE OR REPLACE VIEW mart_carrier_budget AS
SELECT * EXCLUDE (grain, period, h3_cell, site, network_type) FROM budget_mart('carrier');

CREATE OR REPLACE VIEW mart_hexagon_budget AS
SELECT * EXCLUDE (grain, period, carrier, site, network_type) FROM budget_mart('hexagon');

CREATE OR REPLACE VIEW mart_carrier_hexagon_budget AS
SELECT * EXCLUDE (grain, period, site, network_type) FROM budget_mart('carrier_hexagon');

CREATE OR REPLACE VIEW mart_site_budget AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, network_type) FROM budget_mart('site');

CREATE OR REPLACE VIEW mart_hour_budget AS
SELECT period_start AS hour, * EXCLUDE (grain, period, period_start, carrier, h3_cell, site, network_type)
FROM budget_mart('hour');
