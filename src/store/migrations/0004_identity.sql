-- The store's identity: one row, written when the store is created. Every instance the
-- controller launches carries this id (tag `tern:cluster`), and the leak collector touches only
-- instances that carry it, so a lost, empty or swapped store can never terminate the fleet of
-- another store (or of the store it replaced).
CREATE TABLE identity (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    cluster    TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- The launch budget counts a job's recent launches on every launch decision.
CREATE INDEX usage_by_job ON usage (job, started_at);
