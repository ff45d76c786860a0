-- Q4. Which connections were the slowest — with their ids, for a drill-down?
--
--   SELECT * FROM worst_flows('2026-W47', 20);
--   SELECT * FROM packets WHERE flow_id = <flow_id> ORDER BY ts;      -- the packet timeline
--
-- wk: NULL = the latest week; n: NULL = 20. Flows of that week (by flow start) ranked by their
-- slowest complete query (a first query's latency includes the connection setup). flow_id joins
-- every table; community_id joins Zeek, Suricata and Wireshark. worst_query_signatures are what
-- struck the slowest query; top_signature is the one charged the most delay in it;
-- worst_query_top_part / _ms the part of its time budget that took the most of its latency.
-- attributed_delay_ms: the overlapping charged delay of all its queries (secondary: it can exceed
-- their latency).
CREATE OR REPLACE MACRO worst_flows(wk, n) AS TABLE
WITH w AS (
    SELECT coalesce(wk, latest_week()) AS week
),
q AS (
    SELECT q.flow_id,
           count(*)                                          AS queries,
           max(q.latency_ns) / 1e6                           AS worst_latency_ms,
           arg_max(q.query_index, q.latency_ns)              AS worst_query_index,
           arg_max(q.signatures, q.latency_ns)               AS worst_query_signatures,
           arg_max(q.delays, q.latency_ns)                   AS worst_query_delays,
           CAST(sum(q.attributed_delay_ns) AS DOUBLE) / 1e6  AS attributed_delay_ms
    FROM query_facts q, w
    WHERE q.week = w.week
    GROUP BY q.flow_id
),
-- where the slowest query's time went: the part of its time budget that took the most
top_part AS (
    SELECT b.flow_id, arg_max(b.part, b.part_ns) AS worst_query_top_part, max(b.part_ns) / 1e6 AS worst_query_top_part_ms
    FROM query_budget b JOIN q ON b.flow_id = q.flow_id AND b.query_index = q.worst_query_index
    GROUP BY b.flow_id
),
ranked AS (
    SELECT f.*, q.* EXCLUDE (flow_id), tp.worst_query_top_part, tp.worst_query_top_part_ms,
           row_number() OVER (ORDER BY q.worst_latency_ms DESC, f.start, f.flow_id) AS rank
    FROM q JOIN flow_facts f USING (flow_id) LEFT JOIN top_part tp USING (flow_id)
)
SELECT
    CAST(rank AS INTEGER)                                    AS rank,
    flow_id,
    community_id,
    week,
    start,
    protocol,
    client_ip || ':' || client_port                          AS client,
    client_prefix,
    server_ip || ':' || server_port                          AS server,
    carrier,
    network_type,
    h3_cell,
    region,
    site,
    queries,
    worst_latency_ms,
    worst_query_index,
    worst_query_signatures,
    (SELECT arg_max(d.signature, d.delay_ns) FROM (SELECT unnest(worst_query_delays) AS d)) AS top_signature,
    worst_query_top_part,
    worst_query_top_part_ms,
    attributed_delay_ms,
    retransmissions,
    signatures                                               AS flow_signatures,
    duration_ms
FROM ranked
WHERE rank <= coalesce(n, 20)
ORDER BY rank;
