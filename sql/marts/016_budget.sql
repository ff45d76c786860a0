-- The query time budget (docs/queries.md#time-budget), defined once: every query's latency
-- (query_facts.latency_ns: a connection's first query includes its setup) split by the core into
-- disjoint parts that sum to it exactly (the columns budget_<part>_ns of `queries`). Every figure
-- built on it - the tail's time by part per slice, what changed week over week, the what-if p99
-- without a part - is a macro here or in 080_what_changed.sql; `tailscope stats`, the report and
-- the dashboards call them (tests/test_one_definition.py).
--
-- Because the parts are disjoint and add up to the latency, a part's share of a tail's summed
-- latency is <= 100 % and the shares of all parts sum to 100 % - unlike the "charged delay" of
-- 015_attribution.sql, where overlapping retransmissions are each charged their whole wait.

-- budget_parts: the parts, in the order of the Rust list (signatures/src/budget.rs PARTS; a test
-- checks both agree and that `queries` has exactly these budget columns). The one list in SQL.
--   ord            position (1 = first)
--   part           its name
--   budget_column  its column on queries / query_facts
--   label          how a report names it
--   is_loss        time spent recovering lost packets (loss waits, retransmissions by cause, the
--                  policer's drops): what QUIC vs TCP's tail_loss_share sums
CREATE OR REPLACE VIEW budget_parts AS
SELECT ord, part, 'budget_' || part || '_ns' AS budget_column, label, is_loss
FROM (VALUES
    (1,  'handshake',               'connection handshake',            false),
    (2,  'tls_handshake',           'TLS handshake',                   false),
    (3,  'syn_loss',                'SYN loss wait',                   true ),
    (4,  'synack_loss',             'SYN-ACK loss wait',               true ),
    (5,  'server',                  'server time',                     false),
    (6,  'transfer',                'transfer at base RTT',            false),
    (7,  'queueing',                'queueing (RTT above the floor)',  false),
    (8,  'rto',                     'RTO wait',                        true ),
    (9,  'tlp',                     'tail loss probe wait',            true ),
    (10, 'fast_retransmit',         'fast retransmit wait',            true ),
    (11, 'tail_loss',               'tail loss repair',                true ),
    (12, 'spurious_retransmission', 'spurious retransmission stall',   true ),
    (13, 'retransmission',          'other loss recovery',             true ),
    (14, 'policing',                'policing throttle',               true ),
    (15, 'rwnd_limited',            'receive window limited',          false),
    (16, 'other',                   'other',                           false)
) AS t(ord, part, label, is_loss);

-- budget_long(src): the relation named src (a table, view or CTE of the caller holding the
-- budget_*_ns columns of query_facts, e.g. query_facts itself or a tail_of() result) with one row
-- per row and part: its other columns, then ord, part, part_ns. Every part appears, 0 included.
CREATE OR REPLACE MACRO budget_long(src) AS TABLE
WITH u AS (
    UNPIVOT (SELECT * FROM query_table(src)) ON COLUMNS('^budget_.*_ns$') INTO NAME budget_column VALUE part_ns
)
SELECT u.* EXCLUDE (budget_column, part_ns), p.ord, p.part, u.part_ns
FROM u JOIN budget_parts p USING (budget_column);

-- tail_budget(src, level): where the time of each group's tail went. src names a relation of
-- complete queries with grp, latency_ns and the budget_*_ns columns (query_facts'); level as in
-- tail_of (0 = every query, 0.99 = the p99 tail). One row per group and part, every part named:
--   threshold_ns, tail_queries, tail_latency_ns   the group's level percentile, its tail's queries
--                                                 and their summed latency
--   part_ns                                       the part's time summed over the tail
--   share                                         part_ns / tail_latency_ns: <= 1, and 1 summed over
--                                                 the parts (NULL when the tail's latency is 0)
--   mean_ns                                       part_ns / tail_queries: the part's mean time per
--                                                 tail query (what `what_changed` compares)
--   queries_with                                  tail queries that spent time in the part
CREATE OR REPLACE MACRO tail_budget(src, level) AS TABLE
WITH t AS MATERIALIZED (
    SELECT grp, latency_ns, threshold_ns, COLUMNS('^budget_.*_ns$') FROM tail_of(src, level)
),
tot AS (
    SELECT grp, any_value(threshold_ns) AS threshold_ns, count(*) AS tail_queries,
           sum(latency_ns) AS tail_latency_ns
    FROM t GROUP BY grp
),
parts AS (
    SELECT grp, part, sum(part_ns) AS part_ns, count(*) FILTER (WHERE part_ns > 0) AS queries_with
    FROM budget_long('t') GROUP BY grp, part
)
SELECT
    tot.grp,
    bp.ord,
    bp.part,
    bp.label,
    tot.threshold_ns,
    tot.tail_queries,
    tot.tail_latency_ns,
    CAST(coalesce(parts.part_ns, 0) AS BIGINT)                           AS part_ns,
    coalesce(parts.part_ns, 0) / nullif(CAST(tot.tail_latency_ns AS DOUBLE), 0) AS share,
    coalesce(parts.part_ns, 0) / tot.tail_queries                        AS mean_ns,
    coalesce(parts.queries_with, 0)                                      AS queries_with
FROM tot
CROSS JOIN budget_parts bp
LEFT JOIN parts ON parts.grp = tot.grp AND parts.part = bp.part;

-- budget_what_if(src, level): each group's level percentile (0.99 = p99) recomputed with one part
-- removed from every query's latency (latency_ns - that part), per part: the impact of removing a
-- cause (docs/stats.md#what-if). src as for tail_budget. One row per group and part:
--   queries, threshold_ns           the group's queries and its level percentile as measured
--   without_ns                      the percentile of latency_ns - part_ns (nearest rank)
--   saved_ns                        threshold_ns - without_ns (>= 0: removing time never slows a query)
CREATE OR REPLACE MACRO budget_what_if(src, level) AS TABLE
WITH q AS MATERIALIZED (
    SELECT grp, latency_ns, COLUMNS('^budget_.*_ns$') FROM query_table(src)
),
base AS (
    SELECT grp, count(*) AS queries, quantile_disc(latency_ns, level) AS threshold_ns FROM q GROUP BY grp
),
without AS (
    SELECT grp, ord, part, quantile_disc(latency_ns - part_ns, level) AS without_ns
    FROM budget_long('q') GROUP BY grp, ord, part
)
SELECT base.grp, w.ord, w.part, base.queries, base.threshold_ns, w.without_ns,
       base.threshold_ns - w.without_ns AS saved_ns
FROM base JOIN without w USING (grp);
