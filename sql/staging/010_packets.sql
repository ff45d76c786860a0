-- One row per TCP/UDP packet (schema: docs/schemas.md#packets). `date` is the hive partition.
-- Timestamps are exposed as TIMESTAMPTZ (microseconds) so that DuckDB 1.x readers (Grafana's
-- DuckDB plugin) can open the database; nanoseconds stay in the Parquet files and in `ts_ns`.
-- `tag_names` and `retx_cause` are not stored: they are the `tags` bit mask by name
-- (their SQL is made from the native tag tables by jobs/analytics/db.py, packet_tag_sql).
-- `seq`, `ack`, `window`, `window_scaled` are stored without a null mask (0 for a packet that is
-- not TCP: a mask costs the writer per value); TCP's fields are those whose `flags` is set.
CREATE OR REPLACE VIEW packets AS
SELECT capture_id, file, frame, CAST(ts AS TIMESTAMPTZ) AS ts, flow_id, direction, ip_proto,
       CASE WHEN flags IS NOT NULL THEN seq END AS seq,
       CASE WHEN flags IS NOT NULL THEN ack END AS ack,
       rel_seq, rel_ack, payload_len, flags,
       CASE WHEN flags IS NOT NULL THEN "window" END AS "window",
       CASE WHEN flags IS NOT NULL THEN window_scaled END AS window_scaled,
       tsval, tsecr, sack,
       ip_id, ttl, wire_len, encap, tags,
       {tag_names} AS tag_names,
       {retx_cause} AS retx_cause,
       retx_delay_ns, rtt_ns, "date", epoch_ns(ts) AS ts_ns
FROM {packets};
