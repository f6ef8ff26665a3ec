-- Capstan schema v6 (PostgreSQL): what a replica needs to resume a run
-- another replica was running when it died (`[store] resume`): the run's
-- context once its plan is made, as JSON the host writes and reads back;
-- NULL before the plan. Mirrors SQLite schema v8.
ALTER TABLE runs ADD COLUMN checkpoint TEXT;
