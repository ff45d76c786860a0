-- Every frame read is decoded or skipped with a reason: this view shows any file where that
-- does not add up (it should always be empty) next to the per-reason breakdown.
CREATE OR REPLACE VIEW accounting AS
SELECT
    run_id,
    path,
    status,
    frames,
    decoded,
    skipped,
    frames = decoded + skipped AS balanced,
    skipped_by_reason,
    error
FROM files;
