-- Q5. Which slices' tails moved beyond noise this week, and which part of the time budget moved them?
--
--   SELECT * FROM what_changed_slices(NULL) WHERE beyond_noise ORDER BY abs(delta_ms) DESC;
--   SELECT * FROM what_changed_slices('2026-W47') WHERE slice = 'carrier_region';
--
-- wk: NULL = the latest week, compared with the one before. The slices: 'carrier', 'carrier_region'
-- (a carrier in one region), 'hexagon' (all carriers in one H3 cell), 'carrier_hexagon'; keys a
-- slice does not use read '*' (a hexagon's region is its own). Cells without a hexagon and
-- carriers or regions 'unknown' are left out. Columns: those of what_changed (080_what_changed.sql),
-- one row per slice and level (p50 / p95 / p99).
CREATE OR REPLACE MACRO what_changed_slices(wk) AS TABLE
WITH s AS (
    SELECT struct_pack(slice := k.slice,
                       carrier := CASE WHEN k.by_carrier THEN f.carrier ELSE '*' END,
                       region := CASE WHEN k.by_region OR k.by_hexagon THEN f.region ELSE '*' END,
                       h3_cell := CASE WHEN k.by_hexagon THEN f.h3_cell ELSE '*' END) AS grp,
           f.week, f.flow_id AS cluster, f.latency_ns, COLUMNS('^budget_.*_ns$')
    FROM query_facts f
    CROSS JOIN (VALUES ('carrier', true, false, false), ('carrier_region', true, true, false),
                       ('hexagon', false, false, true), ('carrier_hexagon', true, false, true))
               AS k(slice, by_carrier, by_region, by_hexagon)
    WHERE f.week IN (coalesce(wk, latest_week()), previous_week(coalesce(wk, latest_week())))
      AND NOT (k.by_carrier AND f.carrier = 'unknown')
      AND NOT (k.by_region AND f.region = 'unknown')
      AND NOT (k.by_hexagon AND f.h3_cell = 'unknown')
)
SELECT coalesce(wk, latest_week()) AS week, previous_week(coalesce(wk, latest_week())) AS previous_week,
       grp.slice AS slice, grp.carrier AS carrier, grp.region AS region, grp.h3_cell AS h3_cell, * EXCLUDE (grp)
FROM what_changed('s', coalesce(wk, latest_week()));
