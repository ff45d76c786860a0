-- One row per connection (schema: docs/schemas.md#flows), with handy derived columns.
-- Timestamps as TIMESTAMPTZ (microseconds; see 010_packets.sql); durations stay exact.
CREATE OR REPLACE VIEW flows AS
SELECT
    * REPLACE (CAST("start" AS TIMESTAMPTZ) AS "start", CAST("end" AS TIMESTAMPTZ) AS "end"),
    epoch_ns("end") - epoch_ns("start")             AS duration_ns,
    c2s_packets + s2c_packets                        AS packets,
    c2s_bytes + s2c_bytes                            AS bytes,
    -- the client's network, not the client: what reports and dashboards show unless asked for
    -- the address (IPv4 /24, IPv6 /48; docs/privacy.md)
    CASE WHEN contains(client_ip, ':')
         THEN regexp_extract(client_ip, '^([0-9a-fA-F]{{0,4}}(:[0-9a-fA-F]{{1,4}}){{0,2}})') || '::/48'
         ELSE regexp_replace(client_ip, '\.[0-9]+$', '.0') || '/24'
    END                                              AS client_prefix
FROM (
    -- columns added since schema 5 (docs/schemas.md), null on flows written before them
    SELECT * FROM {flows}
    UNION ALL BY NAME
    SELECT NULL::VARCHAR AS service, NULL::BIGINT AS c2s_network_duplicates, NULL::BIGINT AS s2c_network_duplicates
    WHERE false
);
