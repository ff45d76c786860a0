-- One row per request/response exchange (schema: docs/schemas.md#queries).
-- Timestamps as TIMESTAMPTZ (microseconds; see 010_packets.sql); latency_ns etc. stay exact.
CREATE OR REPLACE VIEW queries AS
SELECT * REPLACE (CAST("start" AS TIMESTAMPTZ) AS "start", CAST(first_byte AS TIMESTAMPTZ) AS first_byte,
                  CAST(last_byte AS TIMESTAMPTZ) AS last_byte, CAST("end" AS TIMESTAMPTZ) AS "end")
FROM {queries};
