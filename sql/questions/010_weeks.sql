-- Week helpers for the canned questions (iso_week, iso_week_start and previous_week are defined
-- with the marts, in marts/005_weeks.sql).

-- The latest week with flows in the dataset (what a question means by NULL for its week).
CREATE OR REPLACE MACRO latest_week() AS
    (SELECT max(week) FROM flow_facts);
