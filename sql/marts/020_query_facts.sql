-- query_facts: one row per COMPLETE query (a response was seen and acknowledged; incomplete ones
-- have no meaningful latency — the marts count them apart), with the latency the user waited for
-- and its flow's dimensions. Definitions are those of `tailscope stats` (docs/stats.md):
--   * latency_ns: the exchange's latency, plus for a connection's first query (query_index = 0)
--     its connection setup (setup_ns: first SYN to the first request byte);
--   * signatures: what struck while it was open, from `signatures` and `delays` (distinct);
--   * week / week_start: the ISO week of the query's FLOW start (a slice selects flows; queries
--     follow their flow), so per-week marts equal `tailscope stats --week`;
--   * budget_<part>_ns: the time budget (016_budget.sql): disjoint parts summing to latency_ns;
--     delays / attributed_delay_ns are the older, overlapping "charged delay" (secondary);
--   * hour: the hour (UTC) of the query's own start, for time series;
--   * carrier, hexagon, ...: the flow's enrichment ('unknown' when missing).
CREATE OR REPLACE VIEW query_facts AS
WITH flow AS (
    SELECT DISTINCT ON (flow_id)
        flow_id, protocol, community_id, week, week_start, carrier, asn, network_type, h3_cell,
        h3_res, h3_lat, h3_lng, h3_boundary_geojson, region, site
    FROM flow_facts
    ORDER BY flow_id, start
)
SELECT
    q.flow_id,
    CAST(q.query_index AS INTEGER)                                        AS query_index,
    q.capture_id,
    flow.community_id,
    flow.protocol,
    q.start,
    q."end",
    flow.week,
    flow.week_start,
    timezone('UTC', date_trunc('hour', timezone('UTC', q.start)))         AS hour,
    q.latency_ns + CASE WHEN q.query_index = 0 THEN coalesce(q.setup_ns, 0) ELSE 0 END AS latency_ns,
    (q.latency_ns + CASE WHEN q.query_index = 0 THEN coalesce(q.setup_ns, 0) ELSE 0 END) / 1e6 AS latency_ms,
    q.latency_ns                                                          AS exchange_ns,
    CASE WHEN q.query_index = 0 THEN coalesce(q.setup_ns, 0) ELSE 0 END   AS setup_ns,
    q.ttfb_ns,
    CAST(q.request_bytes AS BIGINT)                                       AS request_bytes,
    CAST(q.response_bytes AS BIGINT)                                      AS response_bytes,
    CAST(q.retransmissions AS BIGINT)                                     AS retransmissions,
    list_distinct(list_concat(coalesce(q.signatures, []),
                              [d.signature FOR d IN coalesce(q.delays, [])])) AS signatures,
    coalesce(q.delays, [])                                                AS delays,
    coalesce(q.attributed_delay_ns, 0)                                    AS attributed_delay_ns,
    -- the time budget: one column per part (016_budget.sql's budget_parts), summing to latency_ns
    COLUMNS('^budget_.*_ns$'),
    flow.carrier,
    flow.asn,
    flow.network_type,
    flow.h3_cell,
    flow.h3_res,
    flow.h3_lat,
    flow.h3_lng,
    flow.h3_boundary_geojson,
    flow.region,
    flow.site
FROM queries q
JOIN flow USING (flow_id)
WHERE q.complete AND q.latency_ns IS NOT NULL;

-- query_signatures: one row per (complete query, signature it carries), with the delay charged to
-- that signature in that query (the sum of its `delays` entries; 0 for signatures that cost no
-- delay, such as reordering). A first query whose connection setup took time also gets a row
-- '(connection setup)' with setup_ns as its delay (charged_signatures / charged_delay, 015).
CREATE OR REPLACE VIEW query_signatures AS
SELECT
    q.flow_id, q.query_index, q.community_id, q.start, q.week, q.week_start, q.hour,
    q.latency_ns, q.latency_ms,
    s.signature,
    charged_delay(s.signature, q.setup_ns, q.delays) AS delay_ns,
    q.carrier, q.network_type, q.h3_cell, q.region, q.site
FROM query_facts q,
     unnest(charged_signatures(q.signatures, q.setup_ns)) AS s(signature);

-- query_budget: one row per (complete query, part of its time budget), every part of budget_parts
-- in its order (ord), 0 included: part_ns sums to latency_ns over a query's rows.
CREATE OR REPLACE VIEW query_budget AS
SELECT flow_id, query_index, community_id, start, week, week_start, hour, latency_ns, ord, part, part_ns,
       carrier, network_type, h3_cell, region, site
FROM budget_long('query_facts');
