-- The ISO week, defined once: every `week` column, `tailscope stats --week` and the report use
-- these. Weeks are ISO weeks (UTC) written 'YYYY-Www' (e.g. 2026-W47); week 1 is the week holding
-- January 4th.

-- The ISO week of a TIMESTAMPTZ, in UTC whatever the session's TimeZone (Grafana's DuckDB plugin
-- uses the server's).
CREATE OR REPLACE MACRO iso_week(ts) AS
    strftime(timezone('UTC', ts), '%G-W%V');

-- The Monday (DATE) of an ISO week.
CREATE OR REPLACE MACRO iso_week_start(wk) AS
    make_date(CAST(substr(wk, 1, 4) AS INTEGER), 1, 4)
    - CAST(isodow(make_date(CAST(substr(wk, 1, 4) AS INTEGER), 1, 4)) - 1 AS INTEGER)
    + 7 * (CAST(substr(wk, 7, 2) AS INTEGER) - 1);

-- The ISO week before `wk` ('2026-W01' -> '2025-W52' or '2025-W53', as the calendar has it).
CREATE OR REPLACE MACRO previous_week(wk) AS
    iso_week(timezone('UTC', CAST(iso_week_start(wk) - 7 AS TIMESTAMP)));
