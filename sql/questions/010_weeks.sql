-- Week helpers for the canned questions. Weeks are ISO weeks written 'YYYY-Www' (e.g. 2026-W47),
-- as `tailscope stats --week` and the marts' `week` column spell them.

-- The Monday (DATE) of an ISO week: week 1 is the week holding January 4th.
CREATE OR REPLACE MACRO iso_week_start(wk) AS
    make_date(CAST(substr(wk, 1, 4) AS INTEGER), 1, 4)
    - CAST(isodow(make_date(CAST(substr(wk, 1, 4) AS INTEGER), 1, 4)) - 1 AS INTEGER)
    + 7 * (CAST(substr(wk, 7, 2) AS INTEGER) - 1);

-- The ISO week before `wk` ('2026-W01' -> '2025-W52' or '2025-W53', as the calendar has it).
CREATE OR REPLACE MACRO previous_week(wk) AS
    strftime(iso_week_start(wk) - 7, '%G-W%V');

-- The latest week with flows in the dataset (what a question means by NULL for its week).
CREATE OR REPLACE MACRO latest_week() AS
    (SELECT max(week) FROM flow_facts);
