-- What changed, week over week, defined once (docs/stats.md#what_changed): the report's summary,
-- `tailscope stats --table what_changed`, the What changed dashboard and the alert rules call
-- what_changed() (or the question what_changed_slices() of sql/questions/060_what_changed.sql).
--
-- For each group and level (p50, p95, p99): the level's percentile this week and last, its change
-- with a 95 % bootstrap interval (bootstrap_quantile, 070: each week's queries resampled
-- independently, bootstrap_resamples() times; the interval is that of the resampled difference),
-- and the change decomposed over the time budget (016): each part's mean time per query of the
-- level's tail (tail_budget), this week and last.

-- The settings, one place each:
--   min_tail   a change counts as beyond noise only when the level's tail holds at least this many
--              queries in both weeks (p99: 1,000 queries a week; p95: 200; p50: 20): a percentile
--              resting on a handful of queries moves with any one of them, and the bootstrap of an
--              extreme quantile from so few is not to be trusted either
CREATE OR REPLACE MACRO what_changed_min_tail() AS 10;

-- what_changed(src, wk): src names a relation of complete queries with grp (any type, e.g. a
-- STRUCT of slice keys), week, cluster (the query's connection: flow_id), latency_ns and the
-- budget_*_ns columns (query_facts'); wk the week
-- compared with the one before (previous_week). One row per group and level:
--   level, level_ord                   'p50' / 'p95' / 'p99' and its order
--   queries, queries_prev              complete queries this week / last week
--   value_ms, value_prev_ms, delta_ms  the level's percentile (nearest rank) and this - last
--   delta_low_ms, delta_high_ms        its 95 % bootstrap interval
--   tail_queries, tail_queries_prev    queries at or above the percentile
--   effective_queries, _prev           the sample size the bootstrap drew for the level (see eff below)
--   enough                             both tails hold what_changed_min_tail() queries
--   beyond_noise                       enough, and the interval excludes 0
--   p_value                            the bootstrap's two-sided p-value of no change (its resolution:
--                                      1 / (bootstrap_resamples() + 1))
--   parts                              per part of the budget, in budget_parts order: mean_ms and
--                                      mean_prev_ms (mean time per tail query), delta_ms, is_new
--                                      (no time in it last week, some this week)
--   top_part, top_part_label, top_part_delta_ms, top_part_new
--                                      the part that moved most in the direction of delta_ms
--                                      (grew most when the percentile rose, shrank most when it fell)
--   top_part_added_ms                  the time that part added over all the slice's queries this week
--                                      ((its mean per query this week - last week's) x queries): how much
--                                      of a change a slice holds, to tell it from the slices around it
CREATE OR REPLACE MACRO what_changed(src, wk) AS TABLE
WITH q AS MATERIALIZED (
    SELECT grp, week = wk AS is_current, cluster, latency_ns, COLUMNS('^budget_.*_ns$')
    FROM query_table(src) WHERE week IN (wk, previous_week(wk))
),
qw AS (
    SELECT struct_pack(g := grp, cur := is_current) AS grp, cluster, latency_ns, COLUMNS('^budget_.*_ns$') FROM q
),
tb AS MATERIALIZED (
    SELECT 'p50' AS level, 1 AS level_ord, 0.5 AS q, * FROM tail_budget('qw', 0.5)
    UNION ALL SELECT 'p95' AS level, 2 AS level_ord, 0.95 AS q, * FROM tail_budget('qw', 0.95)
    UNION ALL SELECT 'p99' AS level, 3 AS level_ord, 0.99 AS q, * FROM tail_budget('qw', 0.99)
),
levels AS (SELECT DISTINCT level, level_ord, q FROM tb),
-- every query (level 0): each part's mean time per query of the whole slice, this week and last
every AS (
    SELECT b.grp.g AS grp, b.part,
           coalesce(any_value(b.mean_ns) FILTER (WHERE b.grp.cur), 0)      AS all_mean_ns,
           coalesce(any_value(b.mean_ns) FILTER (WHERE NOT b.grp.cur), 0)  AS all_mean_prev_ns
    FROM tail_budget('qw', 0) b GROUP BY ALL
),
n AS (
    SELECT grp, count(*) FILTER (WHERE is_current) AS queries, count(*) FILTER (WHERE NOT is_current) AS queries_prev
    FROM q GROUP BY grp
),
lat AS (
    SELECT tb.grp.g AS grp, level, level_ord,
           any_value(threshold_ns) FILTER (WHERE tb.grp.cur)       AS value_ns,
           any_value(threshold_ns) FILTER (WHERE NOT tb.grp.cur)   AS value_prev_ns,
           any_value(tail_queries) FILTER (WHERE tb.grp.cur)       AS tail_queries,
           any_value(tail_queries) FILTER (WHERE NOT tb.grp.cur)   AS tail_queries_prev
    FROM tb GROUP BY ALL
),
-- The effective sample size of each week's percentile: a connection's queries share its path, so
-- they are not independent draws. Kish's design effect of the share of queries in the tail under
-- cluster sampling (clusters: connections), deff = V_cluster / V_iid with V_cluster =
-- C/(C-1) · Σ_c (t_c - p·m_c)² / n² (t_c of a connection's m_c queries in the tail, p = T/n) and
-- V_iid = p(1-p)/n; the bootstrap then draws n / deff values (at least 1, at most n): its interval
-- is as wide as the connections' spread says, not as narrow as n independent queries would make it.
clu_all AS (SELECT grp, cluster, count(*) AS m FROM qw GROUP BY ALL),
clu_tail AS (
    SELECT 'p50' AS level, grp, cluster, count(*) AS t FROM tail_of('qw', 0.5) GROUP BY ALL
    UNION ALL SELECT 'p95' AS level, grp, cluster, count(*) AS t FROM tail_of('qw', 0.95) GROUP BY ALL
    UNION ALL SELECT 'p99' AS level, grp, cluster, count(*) AS t FROM tail_of('qw', 0.99) GROUP BY ALL
),
clu AS (
    SELECT l.level, a.grp, a.cluster, a.m, coalesce(t.t, 0) AS t
    FROM clu_all a CROSS JOIN levels l
    LEFT JOIN clu_tail t ON t.level = l.level AND t.grp = a.grp AND t.cluster = a.cluster
),
eff AS (
    SELECT grp.g AS grp, grp.cur AS cur, level, n,
           CASE WHEN c > 1 AND p > 0 AND p < 1
                THEN n / greatest(1.0, (c / (c - 1) * ss / (n * n)) / (p * (1 - p) / n)) ELSE n END AS n_eff
    FROM (SELECT c1.grp, c1.level, sum(c1.m) AS n, count(*) AS c, sum(c1.t) / sum(c1.m) AS p,
                 sum(power(c1.t - (x.tt / x.nn) * c1.m, 2)) AS ss
          FROM clu c1 JOIN (SELECT grp, level, sum(t) AS tt, sum(m) AS nn FROM clu GROUP BY ALL) x USING (grp, level)
          GROUP BY c1.grp, c1.level)
),
-- both weeks resampled independently (stream 0 last week, 1 this week), per level
bq AS (
    SELECT struct_pack(g := q.grp, level := l.level) AS grp, CAST(q.is_current AS INTEGER) AS stream, l.q AS level,
           e.n_eff AS size, q.latency_ns
    FROM q CROSS JOIN levels l
    JOIN eff e ON e.grp = q.grp AND e.cur = q.is_current AND e.level = l.level
    WHERE q.grp IN (SELECT grp FROM n WHERE queries > 0 AND queries_prev > 0)
),
boot AS (
    SELECT grp, b,
           any_value(latency_ns) FILTER (WHERE stream = 1) - any_value(latency_ns) FILTER (WHERE stream = 0) AS d_ns
    FROM bootstrap_quantile('bq', bootstrap_resamples(), bootstrap_seed()) GROUP BY grp, b
),
ci AS (
    SELECT grp.g AS grp, grp.level AS level,
           quantile_disc(d_ns, 0.025) AS low_ns, quantile_disc(d_ns, 0.975) AS high_ns,
           -- the bootstrap's two-sided p-value of "no change": twice the share of resamples on the
           -- far side of 0 (ties half), (k + 1) / (B + 1) so that it is never 0
           least(1.0, 2 * (least(count(*) FILTER (WHERE d_ns < 0) + count(*) FILTER (WHERE d_ns = 0) / 2,
                                 count(*) FILTER (WHERE d_ns > 0) + count(*) FILTER (WHERE d_ns = 0) / 2) + 1)
                      / (count(*) + 1)) AS p_value
    FROM boot GROUP BY ALL
),
parts AS (
    SELECT tb.grp.g AS grp, level, ord, part, label,
           coalesce(any_value(mean_ns) FILTER (WHERE tb.grp.cur), 0)      AS mean_ns,
           coalesce(any_value(mean_ns) FILTER (WHERE NOT tb.grp.cur), 0)  AS mean_prev_ns
    FROM tb GROUP BY ALL
),
per AS (
    SELECT lat.grp, lat.level,
           list(struct_pack(part := p.part, label := p.label, mean_ms := p.mean_ns / 1e6,
                            mean_prev_ms := p.mean_prev_ns / 1e6, delta_ms := (p.mean_ns - p.mean_prev_ns) / 1e6,
                            is_new := lat.value_prev_ns IS NOT NULL AND p.mean_prev_ns = 0 AND p.mean_ns > 0)
                ORDER BY p.ord) AS parts,
           CASE WHEN any_value(lat.value_ns) >= any_value(lat.value_prev_ns)
                THEN arg_max(p.part, p.mean_ns - p.mean_prev_ns) ELSE arg_min(p.part, p.mean_ns - p.mean_prev_ns) END AS top_part
    FROM lat JOIN parts p ON p.grp = lat.grp AND p.level = lat.level
    GROUP BY lat.grp, lat.level
)
SELECT
    lat.grp,
    lat.level,
    lat.level_ord,
    coalesce(n.queries, 0)                                                  AS queries,
    coalesce(n.queries_prev, 0)                                             AS queries_prev,
    lat.value_ns / 1e6                                                      AS value_ms,
    lat.value_prev_ns / 1e6                                                 AS value_prev_ms,
    (lat.value_ns - lat.value_prev_ns) / 1e6                                AS delta_ms,
    ci.low_ns / 1e6                                                         AS delta_low_ms,
    ci.high_ns / 1e6                                                        AS delta_high_ms,
    coalesce(lat.tail_queries, 0)                                           AS tail_queries,
    (SELECT round(n_eff) FROM eff WHERE eff.grp = lat.grp AND eff.cur AND eff.level = lat.level)    AS effective_queries,
    (SELECT round(n_eff) FROM eff WHERE eff.grp = lat.grp AND NOT eff.cur AND eff.level = lat.level) AS effective_queries_prev,
    coalesce(lat.tail_queries_prev, 0)                                      AS tail_queries_prev,
    coalesce(lat.tail_queries >= what_changed_min_tail() AND lat.tail_queries_prev >= what_changed_min_tail(), false) AS enough,
    coalesce(lat.tail_queries >= what_changed_min_tail() AND lat.tail_queries_prev >= what_changed_min_tail()
             AND (ci.low_ns > 0 OR ci.high_ns < 0), false)                  AS beyond_noise,
    what_changed_min_tail()                                                 AS min_tail,
    ci.p_value,
    per.parts,
    CASE WHEN lat.value_prev_ns IS NOT NULL AND lat.value_ns IS NOT NULL THEN per.top_part END AS top_part,
    CASE WHEN lat.value_prev_ns IS NOT NULL AND lat.value_ns IS NOT NULL
         THEN [x FOR x IN per.parts IF x.part = per.top_part][1].label END AS top_part_label,
    CASE WHEN lat.value_prev_ns IS NOT NULL AND lat.value_ns IS NOT NULL
         THEN [x FOR x IN per.parts IF x.part = per.top_part][1].delta_ms END AS top_part_delta_ms,
    CASE WHEN lat.value_prev_ns IS NOT NULL AND lat.value_ns IS NOT NULL
         THEN [x FOR x IN per.parts IF x.part = per.top_part][1].is_new END AS top_part_new,
    CASE WHEN lat.value_prev_ns IS NOT NULL AND lat.value_ns IS NOT NULL
         THEN (every.all_mean_ns - every.all_mean_prev_ns) * n.queries / 1e6 END AS top_part_added_ms
FROM lat
LEFT JOIN n ON n.grp = lat.grp
LEFT JOIN ci ON ci.grp = lat.grp AND ci.level = lat.level
LEFT JOIN per ON per.grp = lat.grp AND per.level = lat.level
LEFT JOIN every ON every.grp = lat.grp AND every.part = per.top_part;
