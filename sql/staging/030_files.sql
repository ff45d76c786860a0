-- One row per input file per run: what was read, decoded and skipped, and any error.
CREATE OR REPLACE VIEW files AS
SELECT * REPLACE (CAST(first_ts AS TIMESTAMPTZ) AS first_ts, CAST(last_ts AS TIMESTAMPTZ) AS last_ts)
FROM {files};
