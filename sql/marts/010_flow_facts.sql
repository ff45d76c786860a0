-- flow_facts: one row per flow, with the dimensions every mart slices by, spelled exactly as
-- `tailscope stats` slices them (docs/stats.md):
--   * enrichment columns are never null: a missing value is 'unknown' (also for datasets written
--     before enrichment existed: the UNION ALL BY NAME below supplies the columns they lack);
--   * week = iso_week of the flow's start (marts/005_weeks.sql); week_start its Monday 00:00 UTC;
--     hour = the flow's start hour (UTC). Both TIMESTAMPTZ so Grafana plots them as time.
--   * lossy / loss_in_establishment / loss_in_data are the field-study table's definitions, over
--     the sender's retransmissions: a network duplicate (a copy made by a SPAN port or a
--     duplicating link, retx_network_duplicate) is no loss. The flow counters split
--     retransmissions by cause but not by phase, so a flow whose data retransmissions are all
--     network duplicates counts as losing data only if it resent something itself.
-- Times are converted with timezone('UTC', ...) so the result does not depend on the session's
-- TimeZone setting (Grafana's DuckDB plugin uses the server's).
CREATE OR REPLACE VIEW flow_facts AS
WITH f AS (
    SELECT * FROM flows
    UNION ALL BY NAME
    SELECT NULL::VARCHAR AS carrier, NULL::BIGINT AS asn, NULL::VARCHAR AS network_type,
           NULL::VARCHAR AS h3_cell, NULL::INTEGER AS h3_res, NULL::DOUBLE AS h3_lat,
           NULL::DOUBLE AS h3_lng, NULL::VARCHAR AS h3_boundary_geojson, NULL::VARCHAR AS region,
           NULL::VARCHAR AS site
    WHERE false
)
SELECT
    flow_id,
    capture_id,
    community_id,
    protocol,
    client_ip,
    client_prefix,
    CAST(client_port AS INTEGER)                                         AS client_port,
    server_ip,
    CAST(server_port AS INTEGER)                                         AS server_port,
    start,
    "end",
    iso_week(start)                                                      AS week,
    timezone('UTC', date_trunc('week', timezone('UTC', start)))          AS week_start,
    timezone('UTC', date_trunc('hour', timezone('UTC', start)))          AS hour,
    (epoch_ns("end") - epoch_ns(start)) / 1e6                            AS duration_ms,
    CAST(c2s_packets + s2c_packets AS BIGINT)                            AS packets,
    CAST(c2s_bytes + s2c_bytes AS BIGINT)                                AS bytes,
    coalesce(CAST(carrier AS VARCHAR), 'unknown')                        AS carrier,
    asn,
    coalesce(CAST(network_type AS VARCHAR), 'unknown')                   AS network_type,
    coalesce(CAST(h3_cell AS VARCHAR), 'unknown')                        AS h3_cell,
    h3_res,
    h3_lat,
    h3_lng,
    h3_boundary_geojson,
    coalesce(CAST(region AS VARCHAR), 'unknown')                         AS region,
    coalesce(CAST(site AS VARCHAR), 'unknown')                           AS site,
    handshake_rtt_ns / 1e6                                               AS handshake_rtt_ms,
    quic_handshake_rtt_ns / 1e6                                          AS quic_handshake_rtt_ms,
    rtt_p50_ns / 1e6                                                     AS rtt_p50_ms,
    rtt_p95_ns / 1e6                                                     AS rtt_p95_ms,
    -- what the senders resent: network duplicates (copies a SPAN port or a link made) are none
    CAST(coalesce(c2s_retx_packets, 0) - coalesce(c2s_network_duplicates, 0)
         + coalesce(s2c_retx_packets, 0) - coalesce(s2c_network_duplicates, 0)
         + coalesce(syn_retx, 0) + coalesce(synack_retx, 0) AS BIGINT)   AS retransmissions,
    (coalesce(syn_retx, 0) + coalesce(synack_retx, 0) + coalesce(retx_rto, 0) + coalesce(retx_fast, 0)
     + coalesce(retx_tlp, 0) + coalesce(retx_spurious, 0) + coalesce(retx_unknown, 0)) > 0 AS lossy,
    (coalesce(syn_retx, 0) > 0 OR coalesce(synack_retx, 0) > 0)          AS loss_in_establishment,
    (coalesce(c2s_retx_packets, 0) + coalesce(s2c_retx_packets, 0)) > 0
    AND (coalesce(retx_rto, 0) + coalesce(retx_fast, 0) + coalesce(retx_tlp, 0)
         + coalesce(retx_spurious, 0) + coalesce(retx_unknown, 0)) > 0  AS loss_in_data,
    coalesce(signatures, [])                                             AS signatures,
    end_reason,
    first_file
FROM f;
