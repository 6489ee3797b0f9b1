-- Fencing of training workers (`tern agent`). Each start of a job's workers on an instance
-- joins the job's current incarnation or opens the next one; a progress report is taken only
-- from a running worker of the current incarnation. Same text for SQLite and PostgreSQL.
CREATE TABLE workers (
    job         TEXT NOT NULL,
    incarnation BIGINT NOT NULL,
    instance    TEXT NOT NULL,
    running     BIGINT NOT NULL DEFAULT 1,
    -- How the workers ended when they failed for good (exit status, last stderr lines).
    failure     TEXT,
    started_at  BIGINT NOT NULL,
    stopped_at  BIGINT,
    PRIMARY KEY (job, incarnation, instance)
);

