-- One row per signature occurrence (schema: docs/schemas.md#events), with the delay it cost.
CREATE OR REPLACE VIEW events AS
SELECT * FROM {events};
