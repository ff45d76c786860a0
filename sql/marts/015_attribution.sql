-- How a query's latency is charged to signatures, defined once: query_signatures, the signature
-- marts, `tailscope stats` (levels all/p50/p95/p99) and the dashboards' tail panels all use these
-- macros; tests/test_one_definition.py fails if one of them computes it another way.

-- The signatures a query is charged with: those that struck it, plus the pseudo-signature
-- '(connection setup)' when it is a first query whose connection setup took time.
CREATE OR REPLACE MACRO charged_signatures(signatures, setup_ns) AS
    list_concat(signatures, CASE WHEN setup_ns > 0 THEN ['(connection setup)'] ELSE [] END);

-- The delay a query charges one of its signatures: its setup for '(connection setup)', else the
-- sum of its `delays` entries for that signature (0 for one that cost no delay, e.g. reordering).
-- A retransmission is charged the whole time since its bytes were first sent and overlapping ones
-- are each charged, so the shares of a latency can add up past 100 %.
CREATE OR REPLACE MACRO charged_delay(sig, setup_ns, delays) AS
    CASE WHEN sig = '(connection setup)' THEN setup_ns
         ELSE coalesce(list_sum([d.delay_ns FOR d IN delays IF d.signature = sig]), 0)
    END;

-- tail_of(src, level): the tail of each group, defined once (the attribution below, the time
-- budget's marts in 016_budget.sql, what_changed in 080): the rows of the relation named src (a
-- table, view or CTE of the caller with at least grp and latency_ns) at or above their group's
-- level percentile, threshold_ns (nearest rank: quantile_disc, an observed latency) added.
-- level 0 = every row.
CREATE OR REPLACE MACRO tail_of(src, level) AS TABLE
WITH q AS (SELECT * FROM query_table(src)),
lvl AS (SELECT grp, quantile_disc(latency_ns, level) AS threshold_ns FROM q GROUP BY grp)
SELECT q.*, lvl.threshold_ns FROM q JOIN lvl USING (grp) WHERE q.latency_ns >= lvl.threshold_ns;

-- tail_attribution(src, level): tail-latency attribution (docs/stats.md). src names a relation (table, view, or a CTE of the calling query) of complete queries with the
-- columns of query_facts: grp (the group a tail is taken in; any type, e.g. a STRUCT of keys),
-- latency_ns, setup_ns, signatures, delays. level: the percentile the tail starts at (0 = every
-- query, 0.99 = the p99 tail). One row per group and signature struck in the group's tail:
--   threshold_ns                   the group's level percentile (nearest rank: quantile_disc, an
--                                  observed latency); the tail = its queries at or above it
--   tail_queries, tail_latency_ns  the tail's queries and their summed latency
--   queries_with                   tail queries carrying the signature
--   delay_ns                       delay charged to it in the tail (the sum of its `delays`
--                                  entries); NULL for '(none)'
--   median_with_ns, median_without_ns   median latency of the tail's queries with / without it
-- Besides charged_signatures, the pseudo-signature '(none)' stands for the queries carrying none.
CREATE OR REPLACE MACRO tail_attribution(src, level) AS TABLE
WITH tail AS (
    SELECT grp, latency_ns, setup_ns, delays, threshold_ns,
           list_concat(charged_signatures(signatures, setup_ns),
                       CASE WHEN len(signatures) = 0 THEN ['(none)'] ELSE [] END) AS sig_list
    FROM tail_of(src, level)
),
tot AS (
    SELECT grp, any_value(threshold_ns) AS threshold_ns, count(*) AS tail_queries, sum(latency_ns) AS tail_latency_ns
    FROM tail GROUP BY grp
),
sigs AS (
    SELECT DISTINCT grp, u.signature FROM tail, unnest(tail.sig_list) AS u(signature)
),
pairs AS (
    SELECT
        sigs.grp, sigs.signature, t.latency_ns,
        list_contains(t.sig_list, sigs.signature) AS has,
        CASE WHEN sigs.signature <> '(none)' THEN charged_delay(sigs.signature, t.setup_ns, t.delays) END AS delay_ns
    FROM sigs JOIN tail t USING (grp)
)
SELECT
    p.grp,
    p.signature,
    any_value(tot.threshold_ns)                                             AS threshold_ns,
    any_value(tot.tail_queries)                                             AS tail_queries,
    any_value(tot.tail_latency_ns)                                          AS tail_latency_ns,
    count(*) FILTER (WHERE p.has)                                           AS queries_with,
    CASE WHEN p.signature <> '(none)' THEN coalesce(sum(p.delay_ns) FILTER (WHERE p.has), 0) END AS delay_ns,
    median(p.latency_ns) FILTER (WHERE p.has)                               AS median_with_ns,
    median(p.latency_ns) FILTER (WHERE NOT p.has)                           AS median_without_ns
FROM pairs p
JOIN tot USING (grp)
GROUP BY p.grp, p.signature;
