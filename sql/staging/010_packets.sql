-- One row per TCP/UDP packet (schema: docs/schemas.md#packets). `date` is the hive partition.
-- Timestamps are exposed as TIMESTAMPTZ (microseconds) so that DuckDB 1.x readers (Grafana's
-- DuckDB plugin) can open the database; nanoseconds stay in the Parquet files and in `ts_ns`.
CREATE OR REPLACE VIEW packets AS
SELECT * REPLACE (CAST(ts AS TIMESTAMPTZ) AS ts), epoch_ns(ts) AS ts_ns
FROM {packets};
