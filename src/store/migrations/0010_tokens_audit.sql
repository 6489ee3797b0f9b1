-- Scoped API credentials and the audit log of the `/v1` API (issue 39). SQLite dialect; the
-- PostgreSQL one is postgres/0010_tokens_audit.sql (keep them in step).

-- Tokens an admin created (`tern token create`). Only the SHA-256 of the secret is kept, so a
-- copy of the store lets nobody call the API.
CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    role       TEXT NOT NULL,
    team       TEXT,
    job        TEXT,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

-- The key job-scoped agent tokens are derived with (HMAC-SHA256 of the job name), written once
-- when the store is first opened: every controller of the store derives the same tokens, and
-- a restart keeps them valid.
CREATE TABLE secrets (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Every mutating `/v1` call, refusals included: who (token id and role), what (method, path),
-- on which job and team where known, when, and the HTTP status it was answered with.
CREATE TABLE audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    token  TEXT NOT NULL,
    role   TEXT NOT NULL,
    method TEXT NOT NULL,
    path   TEXT NOT NULL,
    job    TEXT,
    team   TEXT,
    status INTEGER NOT NULL
);
CREATE INDEX audit_by_at ON audit (at);
