-- Q2. Which signature explains the p99 in a hexagon?
--
--   SELECT * FROM p99_explained('878c1078dffffff', NULL, '2026-W47');
--   SELECT * FROM p99_explained('878c1078dffffff', 'Northwind Mobile', NULL);
--
-- cell: the H3 cell exactly as in the data (h3_cell; 'unknown' works too). carrier_name: NULL =
-- all carriers; else case-insensitive. wk: NULL = the latest week.
-- One row per signature seen in the cell's queries, the p99 tail's heaviest first:
--   tail_with / tail_rate   tail queries (latency >= p99_ms) carrying it
--   rate, lift              its share among all the cell's queries; lift = tail_rate / rate
--   tail_delay_ms, tail_delay_share   delay charged to it in the tail, and ÷ the tail's latency
--   median_with_ms / median_without_ms   over all the cell's queries
-- Reading: the signature with the largest tail_delay_share and a lift > 1 is what the tail is made
-- of. A '(none)' row at the top means the slow queries carried no transport signature: look at the
-- server or the application. '(connection setup)' is the handshake time first queries waited for.
CREATE OR REPLACE MACRO p99_explained(cell, carrier_name, wk) AS TABLE
WITH w AS (
    SELECT coalesce(wk, latest_week()) AS week
)
SELECT
    s.week,
    CASE WHEN carrier_name IS NULL THEN '(all)' ELSE s.carrier END AS carrier,
    s.h3_cell,
    s.signature,
    s.queries,
    s.p99_ms,
    s.tail_queries,
    s.tail_with,
    s.tail_rate,
    s.rate,
    s.lift,
    s.tail_delay_ms,
    s.tail_delay_share,
    s.delay_ms,
    s.delay_share,
    s.median_with_ms,
    s.median_without_ms
FROM signature_mart(CASE WHEN carrier_name IS NULL THEN 'hexagon' ELSE 'carrier_hexagon' END) AS s, w
WHERE s.week = w.week
  AND lower(s.h3_cell) = lower(cell)
  AND (carrier_name IS NULL OR lower(s.carrier) = lower(carrier_name))
ORDER BY s.tail_delay_ms DESC NULLS LAST, s.tail_rate DESC, s.rate DESC, s.signature;
