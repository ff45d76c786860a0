-- One row per request/response exchange (schema: docs/schemas.md#queries).
CREATE OR REPLACE VIEW queries AS
SELECT * FROM {queries};
