-- Settings an operator changed through the API that must outlive a restart: today the quota
-- file set by `PUT /v1/quotas` (name `quotas`, its TOML), cleared when the file on disk is
-- reloaded (SIGHUP). `set_at` in milliseconds since the epoch.
CREATE TABLE settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    set_at BIGINT NOT NULL
);
