-- Q1. Which hexagons have the worst p99 query latency on a carrier this week?
--
--   SELECT * FROM worst_hexagons('Northwind Mobile', '2026-W47', 10, 1);
--   SELECT * FROM worst_hexagons(NULL, NULL, 10, 20);   -- every carrier, latest week, >= 20 queries
--
-- carrier_name: case-insensitive; NULL = all carriers together. wk: 'YYYY-Www'; NULL = the latest
-- week. n: how many rows (NULL = 10). min_queries: skip hexagons with fewer complete queries
-- (NULL = 1) — a p99 over a handful of queries is anecdotal. Flows without a hexagon ('unknown')
-- are not a hexagon and are left out (mart_carrier_hexagon has them).
-- Each row also names the signature charged the most delay in that hexagon's p99 tail
-- (top_signature; p99_explained() gives the full breakdown).
CREATE OR REPLACE MACRO worst_hexagons(carrier_name, wk, n, min_queries) AS TABLE
WITH w AS (
    SELECT coalesce(wk, latest_week()) AS week
),
m AS (
    SELECT m.*
    FROM latency_mart(CASE WHEN carrier_name IS NULL THEN 'hexagon' ELSE 'carrier_hexagon' END) AS m, w
    WHERE m.week = w.week
      AND (carrier_name IS NULL OR lower(m.carrier) = lower(carrier_name))
      AND m.h3_cell <> 'unknown'
      AND m.queries >= coalesce(min_queries, 1)
),
top AS (
    SELECT s.carrier, s.h3_cell,
           arg_max(s.signature, s.tail_delay_ms)   AS top_signature,
           max(s.tail_delay_ms)                    AS top_signature_tail_delay_ms,
           arg_max(s.tail_delay_share, s.tail_delay_ms) AS top_signature_tail_delay_share,
           arg_max(s.tail_rate, s.tail_delay_ms)   AS top_signature_tail_rate
    FROM signature_mart(CASE WHEN carrier_name IS NULL THEN 'hexagon' ELSE 'carrier_hexagon' END) AS s, w
    WHERE s.week = w.week
      AND (carrier_name IS NULL OR lower(s.carrier) = lower(carrier_name))
      AND s.signature <> '(none)'
      AND s.tail_with > 0
    GROUP BY s.carrier, s.h3_cell
)
SELECT
    CAST(row_number() OVER (ORDER BY m.p99_ms DESC, m.queries DESC, m.h3_cell) AS INTEGER) AS rank,
    m.week,
    CASE WHEN carrier_name IS NULL THEN '(all)' ELSE m.carrier END AS carrier,
    m.h3_cell,
    m.region,
    m.queries,
    m.flows,
    m.p50_ms,
    m.p95_ms,
    m.p99_ms,
    m.lossy_flow_share,
    top.top_signature,
    top.top_signature_tail_delay_ms,
    top.top_signature_tail_delay_share,
    top.top_signature_tail_rate,
    m.h3_lat,
    m.h3_lng
FROM m
LEFT JOIN top ON top.carrier = m.carrier AND top.h3_cell = m.h3_cell
ORDER BY rank
LIMIT coalesce(n, 10);
