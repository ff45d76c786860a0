-- One row per connection (schema: docs/schemas.md#flows), with handy derived columns.
-- Timestamps as TIMESTAMPTZ (microseconds; see 010_packets.sql); durations stay exact.
CREATE OR REPLACE VIEW flows AS
SELECT
    * REPLACE (CAST("start" AS TIMESTAMPTZ) AS "start", CAST("end" AS TIMESTAMPTZ) AS "end"),
    epoch_ns("end") - epoch_ns("start")             AS duration_ns,
    c2s_packets + s2c_packets                        AS packets,
    c2s_bytes + s2c_bytes                            AS bytes
FROM {flows};
