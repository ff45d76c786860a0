-- One row per TCP/UDP packet (schema: docs/schemas.md#packets). `date` is the hive partition.
CREATE OR REPLACE VIEW packets AS
SELECT * FROM {packets};
