-- One row per connection (schema: docs/schemas.md#flows), with handy derived columns.
CREATE OR REPLACE VIEW flows AS
SELECT
    *,
    epoch_ns("end") - epoch_ns("start")             AS duration_ns,
    c2s_packets + s2c_packets                        AS packets,
    c2s_bytes + s2c_bytes                            AS bytes
FROM {flows};
