-- Capstan schema v3 (PostgreSQL): the decision `approved-always` (a person
-- allowed a host for the workspace from now on, which wrote a `[network]`
-- rule). Mirrors SQLite schema v6.
ALTER TABLE approvals DROP CONSTRAINT approvals_decision_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_decision_check CHECK (decision IN
    ('approved', 'approved-for-session', 'approved-always', 'denied', 'aborted', 'expired'));
