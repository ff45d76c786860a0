-- latency_mart(grain): one row per period and key of the grain (see mart_grains):
--   flows: flows (all protocols), tcp_flows, quic_flows, lossy_flows (TCP flows with at least one
--          retransmission by the sender, flow_facts.lossy: network duplicates are no loss), lossy_flow_share (of TCP flows), loss_in_establishment /
--          loss_in_data flows, flows_with_signature (a flow-level signature struck), packets, bytes;
--   queries: complete queries, their latency p50/p95/p99/max/mean in ms (nearest-rank
--          percentiles, quantile_disc: always an observed latency, as `tailscope stats`),
--          queries_with_signature and signature_rate (share carrying any signature),
--          attributed_delay_ms (the delay charged to signatures; overlapping retransmissions are
--          each charged, so it can exceed the latency), setup_ms (connection setup waited for by
--          first queries), latency_sum_ms.
-- Hexagon grains also carry the cell's region, center and GeoJSON outline.
-- Keys a grain does not use read '*'. A row exists when the key has flows or queries.
CREATE OR REPLACE MACRO latency_mart(grain_name) AS TABLE
WITH q AS (
    SELECT
        grain, period, period_start, week, carrier, h3_cell, site, network_type,
        any_value(region)                                        AS q_region,
        any_value(h3_lat)                                        AS q_h3_lat,
        any_value(h3_lng)                                        AS q_h3_lng,
        any_value(h3_boundary_geojson)                           AS q_h3_boundary_geojson,
        count(*)                                                 AS queries,
        quantile_disc(latency_ns, 0.5) / 1e6                     AS p50_ms,
        quantile_disc(latency_ns, 0.95) / 1e6                    AS p95_ms,
        quantile_disc(latency_ns, 0.99) / 1e6                    AS p99_ms,
        max(latency_ns) / 1e6                                    AS max_ms,
        avg(latency_ns) / 1e6                                    AS mean_ms,
        count(*) FILTER (WHERE len(signatures) > 0)              AS queries_with_signature,
        CAST(sum(attributed_delay_ns) AS DOUBLE) / 1e6           AS attributed_delay_ms,
        CAST(sum(setup_ns) AS DOUBLE) / 1e6                      AS setup_ms,
        CAST(sum(latency_ns) AS DOUBLE) / 1e6                    AS latency_sum_ms
    FROM query_slices
    WHERE grain = grain_name
    GROUP BY grain, period, period_start, week, carrier, h3_cell, site, network_type
),
f AS (
    SELECT
        grain, period, period_start, week, carrier, h3_cell, site, network_type,
        any_value(region)                                        AS f_region,
        any_value(h3_lat)                                        AS f_h3_lat,
        any_value(h3_lng)                                        AS f_h3_lng,
        any_value(h3_boundary_geojson)                           AS f_h3_boundary_geojson,
        count(*)                                                 AS flows,
        count(*) FILTER (WHERE protocol = 'tcp')                 AS tcp_flows,
        count(*) FILTER (WHERE protocol = 'quic')                AS quic_flows,
        count(*) FILTER (WHERE protocol = 'tcp' AND lossy)       AS lossy_flows,
        count(*) FILTER (WHERE protocol = 'tcp' AND lossy AND loss_in_establishment) AS loss_in_establishment_flows,
        count(*) FILTER (WHERE protocol = 'tcp' AND lossy AND loss_in_data)          AS loss_in_data_flows,
        count(*) FILTER (WHERE len(signatures) > 0)              AS flows_with_signature,
        CAST(sum(packets) AS BIGINT)                             AS packets,
        CAST(sum(bytes) AS BIGINT)                               AS bytes
    FROM flow_slices
    WHERE grain = grain_name
    GROUP BY grain, period, period_start, week, carrier, h3_cell, site, network_type
)
SELECT
    grain, period, period_start, week, carrier, h3_cell, site, network_type,
    coalesce(q_region, f_region)                                 AS region,
    coalesce(q_h3_lat, f_h3_lat)                                 AS h3_lat,
    coalesce(q_h3_lng, f_h3_lng)                                 AS h3_lng,
    coalesce(q_h3_boundary_geojson, f_h3_boundary_geojson)       AS h3_boundary_geojson,
    coalesce(flows, 0)                                           AS flows,
    coalesce(tcp_flows, 0)                                       AS tcp_flows,
    coalesce(quic_flows, 0)                                      AS quic_flows,
    coalesce(lossy_flows, 0)                                     AS lossy_flows,
    lossy_flows / nullif(tcp_flows, 0)                           AS lossy_flow_share,
    coalesce(loss_in_establishment_flows, 0)                     AS loss_in_establishment_flows,
    coalesce(loss_in_data_flows, 0)                              AS loss_in_data_flows,
    coalesce(flows_with_signature, 0)                            AS flows_with_signature,
    coalesce(packets, 0)                                         AS packets,
    coalesce(bytes, 0)                                           AS bytes,
    coalesce(queries, 0)                                         AS queries,
    p50_ms, p95_ms, p99_ms, max_ms, mean_ms,
    coalesce(queries_with_signature, 0)                          AS queries_with_signature,
    queries_with_signature / nullif(queries, 0)                  AS signature_rate,
    coalesce(attributed_delay_ms, 0)                             AS attributed_delay_ms,
    coalesce(setup_ms, 0)                                        AS setup_ms,
    coalesce(latency_sum_ms, 0)                                  AS latency_sum_ms
FROM f
FULL OUTER JOIN q USING (grain, period, period_start, week, carrier, h3_cell, site, network_type);

-- The named marts: latency_mart at one grain each, without the columns that grain does not use.
CREATE OR REPLACE VIEW mart_week AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, site, network_type, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM latency_mart('week');

CREATE OR REPLACE VIEW mart_carrier AS
SELECT * EXCLUDE (grain, period, h3_cell, site, network_type, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM latency_mart('carrier');

CREATE OR REPLACE VIEW mart_hexagon AS
SELECT * EXCLUDE (grain, period, carrier, site, network_type)
FROM latency_mart('hexagon');

CREATE OR REPLACE VIEW mart_carrier_hexagon AS
SELECT * EXCLUDE (grain, period, site, network_type)
FROM latency_mart('carrier_hexagon');

CREATE OR REPLACE VIEW mart_site AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, network_type, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM latency_mart('site');

CREATE OR REPLACE VIEW mart_network_type AS
SELECT * EXCLUDE (grain, period, carrier, h3_cell, site, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM latency_mart('network_type');

CREATE OR REPLACE VIEW mart_hour AS
SELECT period_start AS hour, * EXCLUDE (grain, period, period_start, carrier, h3_cell, site, network_type, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM latency_mart('hour');

CREATE OR REPLACE VIEW mart_carrier_hour AS
SELECT period_start AS hour, * EXCLUDE (grain, period, period_start, h3_cell, site, network_type, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM latency_mart('carrier_hour');
