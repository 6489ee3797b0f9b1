-- Fencing for highly available controllers. Every take of the lease starts a new reign with a
-- higher `epoch`; a leader's writes check, in their own transaction, that the row still names
-- its holder and epoch, so a deposed leader's writes fail. `address` is where the holder serves
-- its API, so a deposed or standby controller can point clients at the leader.
ALTER TABLE leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN address TEXT;
