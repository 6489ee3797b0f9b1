-- tern controller state, version 1. Times are milliseconds since the Unix epoch (UTC).
-- Applied once by `Store::open`; PRAGMA user_version records the applied version.
-- migrations/postgres/0001_init.sql is the same schema in PostgreSQL types: keep them in step.

CREATE TABLE jobs (
    name               TEXT PRIMARY KEY,
    team               TEXT NOT NULL,
    spec               TEXT NOT NULL,           -- JobSpec as JSON
    state              TEXT NOT NULL,           -- pending | running | finished | unplaceable | cancelled
    reason             TEXT,                    -- why the job is in its state (unplaceable, missed deadline)
    submitted_at       INTEGER NOT NULL,
    deadline_at        INTEGER,
    total_samples      REAL NOT NULL,
    done_samples       REAL NOT NULL DEFAULT 0,
    checkpoint_samples REAL NOT NULL DEFAULT 0,
    checkpoint_at      INTEGER,
    drain_requested    INTEGER NOT NULL DEFAULT 0,
    target_offer       TEXT,                    -- the planner's choice (Offer::key)
    target_count       INTEGER NOT NULL DEFAULT 0,
    last_move_at       INTEGER,
    finished_at        INTEGER,
    updated_at         INTEGER NOT NULL
);

CREATE TABLE intents (
    id         TEXT PRIMARY KEY,                -- IntentId (UUID)
    job        TEXT NOT NULL,
    kind       TEXT NOT NULL,                   -- launch | terminate | migrate | resize
    body       TEXT NOT NULL,                   -- IntentKind as JSON
    state      TEXT NOT NULL,                   -- pending | done | failed | cancelled
    attempt    INTEGER NOT NULL,
    reason     TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX intents_by_state ON intents (state);

CREATE TABLE instances (
    id          TEXT PRIMARY KEY,
    job         TEXT NOT NULL,
    intent      TEXT NOT NULL,
    offer       TEXT NOT NULL,                  -- Offer as JSON
    offer_key   TEXT NOT NULL,
    capacity    TEXT NOT NULL,
    state       TEXT NOT NULL,                  -- pending | running | stopping | terminated
    draining    INTEGER NOT NULL DEFAULT 0,
    launched_at INTEGER NOT NULL,
    ended_at    INTEGER
);
CREATE INDEX instances_by_job ON instances (job);

CREATE TABLE observations (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    job  TEXT NOT NULL,
    at   INTEGER NOT NULL,
    body TEXT NOT NULL                          -- Observation as JSON
);

CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    job     TEXT,
    kind    TEXT NOT NULL,
    message TEXT NOT NULL
);

-- What ran, where, from when to when, at what price: cost reports read this.
CREATE TABLE usage (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    instance            TEXT NOT NULL UNIQUE,
    job                 TEXT NOT NULL,
    offer_key           TEXT NOT NULL,
    capacity            TEXT NOT NULL,
    price_per_hour      REAL NOT NULL,
    on_demand_per_hour  REAL,                   -- the same shape on demand, for savings
    started_at          INTEGER NOT NULL,
    ended_at            INTEGER
);
