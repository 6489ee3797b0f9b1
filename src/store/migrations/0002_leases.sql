-- Leader election for highly available controllers (several controllers, one store).
-- A controller leads while it holds the row's lease; it renews well before `expires_at`
-- (ms since the epoch, the database's clock) and a standby takes the row once it has expired.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    renewed_at BIGINT NOT NULL
);
