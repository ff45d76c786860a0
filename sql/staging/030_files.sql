-- One row per input file per run: what was read, decoded and skipped, and any error.
CREATE OR REPLACE VIEW files AS
SELECT * FROM {files};
