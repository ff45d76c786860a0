-- One row per signature occurrence (schema: docs/schemas.md#events), with the delay it cost.
-- `ts` as TIMESTAMPTZ (microseconds; see 010_packets.sql), nanoseconds in `ts_ns`.
CREATE OR REPLACE VIEW events AS
SELECT * REPLACE (CAST(ts AS TIMESTAMPTZ) AS ts), epoch_ns(ts) AS ts_ns
FROM {events};
